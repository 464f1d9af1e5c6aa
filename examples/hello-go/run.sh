#!/bin/sh
# The manifest's command: fledge runs this inside the plugin dir's copy, and it hands over to
# the prebuilt Go binary (an installed plugin dir must contain a runnable program; fledge does
# not compile plugins). Build it before installing:
#   go build -o examples/hello-go/bin/hello-go ./examples/hello-go
here=$(dirname "$0")
if [ ! -x "$here/bin/hello-go" ]; then
	echo "hello-go: $here/bin/hello-go is missing: build it with 'go build -o examples/hello-go/bin/hello-go ./examples/hello-go' and reinstall" >&2
	exit 126
fi
exec "$here/bin/hello-go" "$@"
