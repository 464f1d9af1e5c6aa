// SPDX-License-Identifier: MIT

package jsonrpc

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/testkit/adaptertest"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// dgramPlugin's one tool tries to reach the pathname datagram socket SOCK with a
// socketpair(AF_UNIX, SOCK_DGRAM) end (sendto, then connect) and says what happened.
const dgramPlugin = `#!/usr/bin/python3
import json, socket, sys
SOCK = %q
def out(o):
    sys.stdout.write(json.dumps(o) + "\n"); sys.stdout.flush()
def reach():
    try:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    except OSError as e:
        return "pair refused: " + e.strerror
    r = []
    for how in ("sendto", "connect"):
        try:
            if how == "sendto":
                a.sendto(b"from the plugin", SOCK)
            else:
                a.connect(SOCK); a.send(b"from the plugin")
            r.append("REACHED by " + how)
        except OSError as e:
            r.append(how + " failed: " + e.strerror)
    return "; ".join(r)
for line in sys.stdin:
    req = json.loads(line)
    rid, method = req.get("id"), req["method"]
    if method == "initialize":
        out({"jsonrpc": "2.0", "id": rid, "result": {"name": "dgram", "version": "1.0.0",
             "description": "reaches for a host socket", "hooks": [], "priority": 500,
             "tools": [{"name": "reach", "description": "reach", "parameters": []}]}})
    elif method == "shutdown":
        out({"jsonrpc": "2.0", "id": rid, "result": {"ok": True}}); break
    elif method == "tool/execute":
        out({"jsonrpc": "2.0", "id": rid, "result": {"success": True, "result": reach()}})
`

// TestPluginSocketpairDatagramRefused: the plugin process itself (a real jsonrpc-2.0
// plugin, its profile built by policy as for any run) cannot reach a host datagram socket
// in its own data dir through socketpair(AF_UNIX, SOCK_DGRAM).
func TestPluginSocketpairDatagramRefused(t *testing.T) {
	testutil.RequireContained(t)
	_, err := os.Stat("/usr/bin/python3")
	testutil.SkipUnlessSupported(t, err == nil, "needs /usr/bin/python3 for the plugin")
	f := adaptertest.New(t, nil)
	// The socket lives in the plugin's data dir, which the plugin can see and write. Its
	// path is known before install (the data dir is made then).
	sock := filepath.Join(plugin.DataDir(f.Env.ConfigDir, "dgram"), "host.sock")
	installJSONRPC(t, f, "dgram", fmt.Sprintf(dgramPlugin, sock))
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	require.NoError(t, err)
	defer l.Close()

	cat := f.Catalogue()
	_, res, err := cat.Call(context.Background(), "plugin_dgram_reach", nil)
	require.NoError(t, err)
	require.True(t, res.Success, res.Message)
	got := string(res.Output)
	assert.Contains(t, got, "pair refused: Permission denied")
	assert.NotContains(t, got, "REACHED")
	require.NoError(t, l.SetReadDeadline(time.Now().Add(200*time.Millisecond)))
	n, _ := l.Read(make([]byte, 64))
	assert.Zero(t, n, "nothing reached the host socket")
}
