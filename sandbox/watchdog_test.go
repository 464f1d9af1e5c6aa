// SPDX-License-Identifier: MIT

package sandbox

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

type calls struct {
	mu     sync.Mutex
	events []string
}

func (c *calls) add(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, s)
}

func (c *calls) get() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string{}, c.events...)
}

func TestWatchdog(t *testing.T) {
	reason := map[StopReason]string{StopTimeout: "timeout", StopCancel: "cancel"}
	tests := []struct {
		name       string
		timeout    time.Duration
		cancel     bool
		exitAfterT bool // the main process exits on SIGTERM
		want       []string
	}{
		{"exits first", 0, false, false, []string{}},
		{"timeout, exits on TERM", 10 * time.Millisecond, false, true, []string{"timeout", "term"}},
		{"timeout, ignores TERM", 10 * time.Millisecond, false, false, []string{"timeout", "term", "kill"}},
		{"cancel", 0, true, true, []string{"cancel", "term"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			exited := make(chan struct{})
			var c calls
			var once sync.Once
			exit := func() { once.Do(func() { close(exited) }) }
			if tt.cancel {
				cancel()
			}
			if tt.timeout == 0 && !tt.cancel {
				exit()
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				Watchdog(ctx, Limits{Timeout: tt.timeout, KillGrace: 20 * time.Millisecond}, exited,
					func(r StopReason) { c.add(reason[r]) },
					func() {
						c.add("term")
						if tt.exitAfterT {
							exit()
						}
					},
					func() { c.add("kill"); exit() })
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("watchdog did not return")
			}
			assert.Equal(t, tt.want, c.get())
		})
	}
}
