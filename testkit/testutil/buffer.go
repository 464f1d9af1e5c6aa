// SPDX-License-Identifier: MIT

package testutil

import (
	"bytes"
	"os"
	"strconv"
	"sync"
)

// SyncBuffer is a bytes.Buffer safe for the concurrent writers a session or a UI has.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Reset empties the buffer.
func (s *SyncBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}

// ProcessesMatching lists live processes (other than this one) whose command line
// contains m: attack tests plant a unique marker in what they start and scan for
// survivors. A zombie's command line is empty, so reaped-but-unwaited ones don't count.
func ProcessesMatching(m string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(b, []byte(m)) {
			out = append(out, pid)
		}
	}
	return out
}
