#!/bin/bash
# Asks one question, then ignores the cancel that answers it and SIGTERM: only the host's
# SIGKILL ends it. A marker file says whether it ever went past the ladder.
trap '' TERM
read -r INIT
echo '{"type":"prompt","id":"p","message":"Nobody answers this"}'
read -r CANCEL
echo "$CANCEL" > ./cancel   # the cwd is its data dir
while true; do sleep 0.2; done
