// SPDX-License-Identifier: MIT

package invokev1

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/sandbox/linux"
	"github.com/fledgehq/fledge/testkit/adaptertest"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// Where there is no network namespace for the plugin (unprivileged fledge), the Landlock
// port rule still holds it to one port, fledge connects to it directly, and a plugin that
// bound that port on anything but loopback is refused.
func TestTCPWithoutNetworkNamespace(t *testing.T) {
	f := noNetnsFixture(t)
	s := start(t, f, install(t, f, "tcp", `transport = "tcp"`, noGrants), Limits{})
	var c collector
	out := s.Invoke(context.Background(), "tool", "echo", json.RawMessage(`{"a":1}`), c.sink)
	require.Nil(t, out.Failure)
	assert.JSONEq(t, `{"type":"tool","request":{"a":1}}`, string(c.events[1].Response))
	port, got := hostListener(t)
	var c2 collector
	out = s.Invoke(context.Background(), "tool", "connect_out", json.RawMessage(`{"port":`+strconv.Itoa(port)+`}`), c2.sink)
	require.Nil(t, out.Failure)
	var res map[string]string
	require.NoError(t, json.Unmarshal(c2.events[1].Response, &res))
	assert.Equal(t, "Permission denied", res["connect"], "Landlock refuses the connect")
	select {
	case <-got:
		t.Fatal("the host listener got a connection from the plugin")
	default:
	}

	f2 := noNetnsFixture(t)
	b := install(t, f2, "tcp_any", `transport = "tcp"`, noGrants)
	s2, fl := Start(context.Background(), Options{Host: host(f2), Binding: b})
	require.Nil(t, s2)
	require.NotNil(t, fl)
	assert.Equal(t, reason.LaunchFailed, fl.Code)
	assert.Contains(t, fl.Msg, "listens on 0.0.0.0:")
}

// TestTCPPluginOwnPort: a plugin written for the Dify-style TCP mode binds port 0 (or a
// port of its own) instead of FLEDGE_LISTEN_PORT and announces it: in its own network
// namespace that works, fledge connects to the announced loopback port, and the plugin still
// connects nowhere.
func TestTCPPluginOwnPort(t *testing.T) {
	for _, mode := range []string{"tcp_port0", "tcp_own_port"} {
		t.Run(mode, func(t *testing.T) {
			f := adaptertest.New(t, nil)
			testutil.SkipUnlessSupported(t, strings.Contains(f.Env.Sandbox.Report().NetworkDeny, "netns"), "no network namespace for plugins here")
			s, fl := Start(context.Background(), Options{Host: host(f), Binding: install(t, f, mode, `transport = "tcp"`, noGrants)})
			require.Nil(t, fl, "the plugin's own port is refused")
			t.Cleanup(func() { s.Close() })
			require.NotNil(t, s.conn, "connected over TCP")
			var c collector
			out := s.Invoke(context.Background(), "tool", "echo", json.RawMessage(`{"own":"port"}`), c.sink)
			require.Nil(t, out.Failure)
			assert.JSONEq(t, `{"type":"tool","request":{"own":"port"}}`, string(c.events[1].Response))
			if mode == "tcp_own_port" {
				assert.Contains(t, f.Stderr.String(), "plugin is running on 127.0.0.1:5003")
			}

			port, got := hostListener(t)
			var c2 collector
			out = s.Invoke(context.Background(), "tool", "connect_out", json.RawMessage(`{"port":`+strconv.Itoa(port)+`}`), c2.sink)
			require.Nil(t, out.Failure)
			var res map[string]string
			require.NoError(t, json.Unmarshal(c2.events[1].Response, &res))
			assert.NotEqual(t, "ok", res["connect"], "it connects nowhere")
			select {
			case <-got:
				t.Fatal("the host listener got a connection from the plugin")
			default:
			}
		})
	}
}

// Without a network namespace the current rule holds: port 0 or a port of its own is
// refused (Landlock), the plugin cannot start, and nothing was bound on the host.
func TestTCPPluginOwnPortWithoutNetworkNamespace(t *testing.T) {
	f := noNetnsFixture(t)
	s, fl := Start(context.Background(), Options{Host: host(f), Binding: install(t, f, "tcp_port0", `transport = "tcp"`, noGrants)})
	require.Nil(t, s)
	require.NotNil(t, fl)
	assert.Equal(t, reason.LaunchFailed, fl.Code)
	assert.Contains(t, f.Stderr.String(), "Permission denied", "bind refused")
}

func TestProcIP(t *testing.T) {
	assert.Equal(t, "127.0.0.1", procIP("0100007F").String())
	assert.Equal(t, "0.0.0.0", procIP("00000000").String())
	assert.Equal(t, "::1", procIP("00000000000000000000000001000000").String())
	assert.Nil(t, procIP("xyz"))
}

// Without a network namespace, a TCP plugin is held to FLEDGE_LISTEN_PORT.
var platformTCPRefusedCases = []tcpRefusedCase{
	{"tcp_wrong_port_no_netns", "tcp_wrong_port", "may listen only on port", noNetnsFixture},
}

// noNetnsFixture is a fixture whose sandbox has no network namespaces (as for an
// unprivileged user); the fixture closes it.
func noNetnsFixture(t *testing.T) *adaptertest.Fixture {
	f := adaptertest.New(t, nil)
	sb, err := linux.New(linux.Options{DisableNetNS: true})
	require.NoError(t, err)
	f.Env.Sandbox = sb
	testutil.SkipUnlessSupported(t, sb.LandlockABI() >= 4, "Landlock network rules need ABI 4")
	return f
}
