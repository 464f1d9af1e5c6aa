// SPDX-License-Identifier: MIT

//go:build !linux

package audit

import "os"

// SyncSuffix names the shared page of the cross-process group commit (Linux only; elsewhere
// each process syncs its own records).
const SyncSuffix = ".sync"

type sharedSync struct{}

func openShared(string) *sharedSync { return nil }

func (s *sharedSync) close() {}

func fileKey(os.FileInfo) uint64 { return 0 }

func (s *sharedSync) wrote(uint64) uint64 { return 0 }

func (l *Log) syncFor(f *os.File, _ uint64) error { return l.io.syncFile(f) }
