#!/bin/bash
read -r INIT
echo '{"type":"output","text":"bye\n"}'
exit 3
