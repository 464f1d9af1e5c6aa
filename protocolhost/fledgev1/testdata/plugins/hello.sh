#!/bin/bash
# A bash plugin in the style of the spec's example: every fire-and-forget message, a prompt,
# an exec, store and load, and the reply lines echoed back as output for the test to read.
read -r INIT
echo '{"type":"log","level":"info","message":"hello from bash"}'
echo '{"type":"progress","message":"working","current":1,"total":2}'
echo '{"type":"progress","done":true}'
echo '{"type":"prompt","id":"p1","message":"Name?","default":"world"}'
read -r R1
echo '{"type":"store","key":"greeted","value":"yes"}'
echo '{"type":"load","id":"l1","key":"greeted"}'
read -r R2
echo '{"type":"exec","id":"e1","command":"echo from-exec; seq 3 | grep 2"}'
read -r R3
printf '{"type":"output","text":"init=%s\\n"}\n' "$(printf '%s' "$INIT" | sed 's/\\/\\\\/g; s/"/\\"/g')"
for r in "$R1" "$R2" "$R3"; do
  printf '{"type":"output","text":"reply=%s\\n"}\n' "$(printf '%s' "$r" | sed 's/\\/\\\\/g; s/"/\\"/g')"
done
exit 0
