// SPDX-License-Identifier: MIT

package fledgev1

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// refuseDecisions is the fixture's real log, except that an exec_decision cannot be
// written (as on a full disk): every other record lands.
type refuseDecisions struct{ log *audit.Log }

func (r refuseDecisions) Append(rec *audit.Record, durable bool) error {
	if rec.Event == audit.EventExecDecision {
		return errors.New("no space left on device")
	}
	return r.log.Append(rec, durable)
}

// TestExecRefusedWithoutItsDecisionRecord: the decision is written while the sandbox is
// prepared, and a command whose decision could not be written never starts: the plugin is
// refused (code 126, in words of the protocol), nothing the command would have made exists,
// no exec_outcome says it ran, and the next exec is refused the same way.
func TestExecRefusedWithoutItsDecisionRecord(t *testing.T) {
	testutil.RequireContained(t)
	f := newFixture(t, "scripted.py", execGrant)
	log, err := audit.Open(f.auditPath, audit.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = log.Close() })
	f.opts.Audit = refuseDecisions{log}
	marker := filepath.Join(f.project, "ran-"+uniq(t))
	js, err := json.Marshal([]any{
		msg("type", "exec", "id", "one", "command", "touch "+marker),
		msg("type", "exec", "id", "two", "command", "touch "+marker+"-2"),
	})
	require.NoError(t, err)
	f.opts.Args = []string{string(js)}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err = Run(ctx, f.opts)
	require.ErrorContains(t, err, "2 records could not be written", "the session says its log lost records")
	var rep scriptReport
	lines := strings.Split(strings.TrimSpace(f.stdout.String()), "\n")
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &rep), "stdout:\n%s", f.stdout.String())
	for _, id := range []string{"one", "two"} {
		v := f.execValue(rep, id)
		assert.EqualValues(t, 126, v["code"], "%s: %v", id, v)
		assert.Equal(t, "fledge: exec refused: the audit log cannot record it\n", v["stderr"], id)
		assert.NotContains(t, v["stderr"], "no space left", "the host's error text is not the plugin's")
	}
	assert.NoFileExists(t, marker)
	assert.NoFileExists(t, marker+"-2")
	assert.Empty(t, f.findRecords(audit.EventExecOutcome), "nothing ran, so nothing ended")
	assert.Empty(t, f.findRecords(audit.EventExecDecision))
	assert.Equal(t, 2, strings.Count(f.stderr.String(), "audit log write failed, exec refused"), f.stderr.String())
	ents, err := os.ReadDir(f.project)
	require.NoError(t, err)
	for _, e := range ents {
		assert.False(t, strings.HasPrefix(e.Name(), "ran-"), e.Name())
	}
}
