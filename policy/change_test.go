// SPDX-License-Identifier: MIT

package policy

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGrantOne(t *testing.T) {
	none := Grants{Filesystem: FilesystemNone}
	declared := Grants{Exec: true, Filesystem: FilesystemNone}
	asked := declared
	defaulted := Grants{Store: true, Filesystem: FilesystemNone} // manifest without filesystem
	askedDefault := Grants{Store: true, Filesystem: FilesystemDefault}
	cases := []struct {
		name        string
		cur         Grants
		declared    Grants
		asked       Grants
		item        string
		want        Grants
		unrequested []string
		err         error
	}{
		{"declared exec", none, declared, asked, "exec", Grants{Exec: true, Filesystem: "none"}, nil, nil},
		{"undeclared store is refused", none, declared, asked, "store", Grants{}, nil, ErrNotDeclared},
		{"undeclared metadata is refused", none, declared, asked, "metadata", Grants{}, nil, ErrProtocolCapability},
		{"network beyond the manifest is allowed, flagged", none, declared, asked, "network", Grants{Network: true, Filesystem: "none"}, []string{"network"}, nil},
		{"filesystem beyond an explicit none is flagged", none, declared, asked, "filesystem", Grants{Filesystem: "project"}, []string{"filesystem=project"}, nil},
		{"filesystem=plugin beyond none is flagged", none, declared, asked, "filesystem=plugin", Grants{Filesystem: "plugin"}, []string{"filesystem=plugin"}, nil},
		{"the default level is what it asks for", Grants{Store: true, Filesystem: "none"}, defaulted, askedDefault, "filesystem", Grants{Store: true, Filesystem: "project"}, nil, nil},
		{"a lower level than asked is not flagged", askedDefault, defaulted, askedDefault, "filesystem=plugin", Grants{Store: true, Filesystem: "plugin"}, nil, nil},
		{"keeps what was granted", Grants{Exec: true, Filesystem: "project"}, declared, asked, "network", Grants{Exec: true, Network: true, Filesystem: "project"}, []string{"network"}, nil},
		{"unknown", none, declared, asked, "root", Grants{}, nil, ErrUnknownCapability},
		{"lists are refused", none, declared, asked, "exec,network", Grants{}, nil, ErrUnknownCapability},
		{"bad level", none, declared, asked, "filesystem=all", Grants{}, nil, ErrUnknownCapability},
		// The CLI spells a level "filesystem=<level>"; runtime-v1's wire spelling is not a
		// capability name users type (plugins grant refused it before the shared parser).
		{"wire spelling", none, declared, asked, "filesystem:plugin", Grants{}, nil, ErrUnknownCapability},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := GrantOne(tc.cur, tc.declared, tc.asked, tc.item)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, c.After)
			assert.Equal(t, tc.unrequested, c.Unrequested)
			assert.Equal(t, tc.cur, c.Before)
		})
	}
}

func TestRevokeOne(t *testing.T) {
	all := Grants{Exec: true, Store: true, Metadata: true, Network: true, Filesystem: FilesystemProject}
	for item, want := range map[string]Grants{
		"exec":       {Store: true, Metadata: true, Network: true, Filesystem: "project"},
		"store":      {Exec: true, Metadata: true, Network: true, Filesystem: "project"},
		"metadata":   {Exec: true, Store: true, Network: true, Filesystem: "project"},
		"network":    {Exec: true, Store: true, Metadata: true, Filesystem: "project"},
		"filesystem": {Exec: true, Store: true, Metadata: true, Network: true, Filesystem: "none"},
	} {
		c, err := RevokeOne(all, item)
		require.NoError(t, err, item)
		assert.Equal(t, want, c.After, item)
	}
	// network=true is the whole network: revoked with every destination, applied as "network".
	c, err := RevokeOne(Grants{Network: true, NetworkTo: []string{"a.example:443"}}, "network=true")
	require.NoError(t, err)
	assert.Equal(t, "network", c.Item)
	assert.Equal(t, Grants{Filesystem: "none"}, c.After)
	// "filesystem:project" (runtime-v1's spelling) is refused as unknown, like any level.
	for _, bad := range []string{"filesystem=plugin", "filesystem:project", "filesystem:", "", "none", "exec,store", "sudo"} {
		_, err := RevokeOne(all, bad)
		assert.ErrorIs(t, err, ErrUnknownCapability, bad)
	}
}
