/* SPDX-License-Identifier: MIT */
/* samples.c: the sample books both stores insert on first start. */
#include "store_backend.h"

static const lk_sample_book sample_books[] = {
    {"The C Programming Language", "Brian W. Kernighan, Dennis M. Ritchie", "978-0131103627", 1988,
     5},
    {"Structure and Interpretation of Computer Programs", "Harold Abelson, Gerald Jay Sussman",
     "978-0262510875", 1996, 3},
    {"The Art of Computer Programming, Vol. 1", "Donald E. Knuth", "978-0201896831", 1997, 2},
    {"Designing Data-Intensive Applications", "Martin Kleppmann", "978-1449373320", 2017, 4},
    {"TCP/IP Illustrated, Vol. 1", "W. Richard Stevens", "978-0201633467", 1994, 3},
    {"Release It!", "Michael T. Nygard", "978-1680502398", 2018, 6},
    {"Site Reliability Engineering", "Betsy Beyer et al.", "978-1491929124", 2016, 5},
    {"Computer Networks", "Andrew S. Tanenbaum", "978-0132126953", 2010, 2},
    {"Operating Systems: Three Easy Pieces", "Remzi and Andrea Arpaci-Dusseau", "978-1985086593",
     2018, 7},
    {"The Mythical Man-Month", "Frederick P. Brooks Jr.", "978-0201835953", 1995, 1},
    {"Unix Network Programming, Vol. 1", "W. Richard Stevens", "978-0131411555", 2003, 3},
    {"A Philosophy of Software Design", "John Ousterhout", "978-1732102200", 2018, 8},
};

const lk_sample_book *lk_store_sample_books(size_t *n) {
  *n = sizeof sample_books / sizeof sample_books[0];
  return sample_books;
}
