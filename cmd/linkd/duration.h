/* Durations on the command line and in the config file: "250ms", "3s", "1m30s", "1.5s". */
#ifndef LINKD_CLI_DURATION_H
#define LINKD_CLI_DURATION_H

#include <stddef.h>
#include <stdint.h>

/* Parses one or more <number><unit> terms, summed: number = digits with an optional fraction
 * (".5"), unit = ns | us | ms | s | m | h. No sign, no blanks, no bare numbers: "250" is refused
 * because its unit would be a guess. Fractions finer than 1 ns are dropped.
 * Returns 0 with *out in ns, or -1 with a message (no trailing period) in err. */
int cli_duration_parse(const char *s, int64_t *out, char *err, size_t cap);

/* Short form for humans in the largest unit that keeps the integer part >= 1, with at most three
 * decimals (truncated, trailing zeros dropped): "3s", "1.5s", "800ms", "12.345ms", "250us",
 * "17ns". Negative values print as "-" + the form of their magnitude. Returns buf. */
char *cli_duration_format(int64_t ns, char *buf, size_t cap);

#endif
