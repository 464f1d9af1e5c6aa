#!/bin/bash
# Ignores SIGTERM and cancel so the host must escalate to SIGKILL.
trap '' TERM
read -r INIT
echo '{"type":"log","level":"info","message":"sleeping"}'
while true; do sleep 1; done
