-- SPDX-License-Identifier: MIT
-- wrk script: POST /books/{BOOK}/loans always with the same Idempotency-Key: after the first
-- request, every one is a replay read from the key store (no new loan).
function init(args)
  book = args[1] or "1"
  key = args[2] or "bench-replay"
end

function request()
  return wrk.format("POST", "/books/" .. book .. "/loans",
                    { ["Idempotency-Key"] = key, ["Content-Length"] = "0" }, "")
end
