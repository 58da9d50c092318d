-- SPDX-License-Identifier: MIT
-- wrk script: POST /books/{BOOK}/loans with a fresh Idempotency-Key per request (every request
-- is a new logical operation, so every one commits a loan and its key record).
counter = 0

threads = 0

function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

function init(args)
  book = args[1] or "1"
  run = args[2] or tostring(os.time())
end

function request()
  counter = counter + 1
  local key = "bench-" .. run .. "-" .. tid .. "-" .. counter
  return wrk.format("POST", "/books/" .. book .. "/loans",
                    { ["Idempotency-Key"] = key, ["Content-Length"] = "0" }, "")
end
