#!/bin/bash
# Ignores SIGINT (a user interrupt sends it to the group), SIGTERM and cancel, so the
# host must escalate to SIGKILL.
trap '' TERM INT
read -r INIT
echo '{"type":"log","level":"info","message":"sleeping"}'
while true; do sleep 1; done
