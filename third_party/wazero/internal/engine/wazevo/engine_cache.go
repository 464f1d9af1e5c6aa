package wazevo

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"unsafe"

	"github.com/fledgehq/fledge/third_party/wazero/experimental"
	"github.com/fledgehq/fledge/third_party/wazero/internal/engine/wazevo/backend"
	"github.com/fledgehq/fledge/third_party/wazero/internal/engine/wazevo/ssa"
	"github.com/fledgehq/fledge/third_party/wazero/internal/engine/wazevo/wazevoapi"
	"github.com/fledgehq/fledge/third_party/wazero/internal/filecache"
	"github.com/fledgehq/fledge/third_party/wazero/internal/platform"
	"github.com/fledgehq/fledge/third_party/wazero/internal/u32"
	"github.com/fledgehq/fledge/third_party/wazero/internal/u64"
	"github.com/fledgehq/fledge/third_party/wazero/internal/wasm"
)

// (fledge patch) CRC-32 (IEEE) rather than upstream's CRC-32C: a cache hit checksums all of
// a module's machine code (15 MB for a Go-built one), and Go computes the IEEE polynomial
// with carry-less multiplication about five times as fast on amd64 (0.5 ms instead of
// 2.7 ms for 15 MB); on arm64 both are one instruction per 8 bytes. Either catches damage
// alike; neither is a signature.
var crc = crc32.IEEETable

// fileCacheKey returns a key for the file cache.
// In order to avoid collisions with the existing compiler, we do not use m.ID directly,
// but instead we rehash it with magic.
func fileCacheKey(m *wasm.Module) (ret filecache.Key) {
	s := sha256.New()
	s.Write(m.ID[:])
	s.Write(magic)
	// Write the CPU features so that we can cache the compiled module for the same CPU.
	// This prevents the incompatible CPU features from being used.
	cpu := platform.CpuFeatures.Raw()
	// Reuse the `ret` buffer to write the first 8 bytes of the CPU features so that we can avoid the allocation.
	binary.LittleEndian.PutUint64(ret[:8], cpu)
	s.Write(ret[:8])
	// Finally, write the hash to the ret buffer.
	s.Sum(ret[:0])
	return
}

func (e *engine) addCompiledModule(module *wasm.Module, cm *compiledModule) (c *compiledModule, err error) {
	c = e.addCompiledModuleToMemory(module, cm)
	if !module.IsHostModule && e.fileCache != nil {
		err = e.addCompiledModuleToCache(module, c)
	}
	return
}

func (e *engine) getCompiledModule(module *wasm.Module, listeners []experimental.FunctionListener, ensureTermination bool) (cm *compiledModule, ok bool, err error) {
	cm, ok = e.getCompiledModuleFromMemory(module, true)
	if ok {
		return
	}
	cm, ok, err = e.getCompiledModuleFromCache(module)
	if ok {
		cm.parent = e
		cm.module = module
		cm.sharedFunctions = e.sharedFunctions
		cm.ensureTermination = ensureTermination
		cm.offsets = wazevoapi.NewModuleContextOffsetData(module, len(listeners) > 0)
		if len(listeners) > 0 {
			cm.listeners = listeners
			cm.listenerBeforeTrampolines = make([]*byte, len(module.TypeSection))
			cm.listenerAfterTrampolines = make([]*byte, len(module.TypeSection))
			for i := range module.TypeSection {
				typ := &module.TypeSection[i]
				before, after := e.getListenerTrampolineForType(typ)
				cm.listenerBeforeTrampolines[i] = before
				cm.listenerAfterTrampolines[i] = after
			}
		}
		e.addCompiledModuleToMemory(module, cm)
		ssaBuilder := ssa.NewBuilder()
		machine := newMachine()
		be := backend.NewCompiler(context.Background(), machine, ssaBuilder)
		cm.executables.compileEntryPreambles(module, machine, be)

		// Set the finalizer.
		e.setFinalizer(cm.executables, executablesFinalizer)
	}
	return
}

func (e *engine) addCompiledModuleToMemory(m *wasm.Module, cm *compiledModule) *compiledModule {
	e.mux.Lock()
	defer e.mux.Unlock()
	if c, ok := e.compiledModules[m.ID]; ok {
		c.refCount++
		return c.compiledModule
	}
	e.compiledModules[m.ID] = &compiledModuleWithCount{compiledModule: cm, refCount: 1}
	if len(cm.executable) > 0 {
		e.addCompiledModuleToSortedList(cm)
	}
	return cm
}

func (e *engine) getCompiledModuleFromMemory(module *wasm.Module, increaseRefCount bool) (cm *compiledModule, ok bool) {
	e.mux.Lock()
	defer e.mux.Unlock()

	cmWithCount, ok := e.compiledModules[module.ID]
	if ok {
		cm = cmWithCount.compiledModule
		if increaseRefCount {
			cmWithCount.refCount++
		}
	}
	return
}

func (e *engine) addCompiledModuleToCache(module *wasm.Module, cm *compiledModule) (err error) {
	if e.fileCache == nil || module.IsHostModule {
		return
	}
	key := fileCacheKey(module)
	err = e.fileCache.Add(key, serializeCompiledModule(e.wazeroVersion, key, cm))
	return
}

// LoadCachedModule implements wasm.CachedModuleLoader. (fledge patch)
func (e *engine) LoadCachedModule(_ context.Context, module *wasm.Module, ensureTermination bool) (bool, error) {
	if module.IsHostModule {
		return false, nil
	}
	if wazevoapi.PerfMapEnabled {
		wazevoapi.PerfMap.Lock()
		defer wazevoapi.PerfMap.Unlock()
	}
	_, ok, err := e.getCompiledModule(module, nil, ensureTermination)
	if err != nil {
		// An entry that cannot be used is dropped: the caller validates and compiles the
		// module again, and that rewrites the entry. If it cannot be dropped (an I/O
		// error), that compile meets the same error and returns it.
		if e.fileCache != nil {
			_ = e.fileCache.Delete(fileCacheKey(module))
		}
		return false, nil
	}
	return ok, nil
}

func (e *engine) getCompiledModuleFromCache(module *wasm.Module) (cm *compiledModule, hit bool, err error) {
	if e.fileCache == nil || module.IsHostModule {
		return
	}

	// Check if the entries exist in the external cache.
	var cached io.ReadCloser
	key := fileCacheKey(module)
	cached, hit, err = e.fileCache.Get(key)
	if !hit || err != nil {
		return
	}

	// Otherwise, we hit the cache on external cache.
	// We retrieve *code structures from `cached`.
	var staleCache bool
	// Note: cached.Close is ensured to be called in deserializeCodes.
	cm, staleCache, err = deserializeCompiledModule(e.wazeroVersion, key, cached)
	if err == nil && !staleCache && len(cm.functionOffsets) != len(module.CodeSection) {
		// (fledge patch) Not this module's code, whatever its checksum says.
		releaseDeserialized(cm)
		err = fmt.Errorf("compilationcache: entry has %d functions, the module %d", len(cm.functionOffsets), len(module.CodeSection))
	}
	if err != nil {
		return nil, false, err
	} else if staleCache {
		return nil, false, e.fileCache.Delete(key)
	}
	return
}

// releaseDeserialized unmaps the code of a compiled module that deserializeCompiledModule
// returned but is not used. (fledge patch)
func releaseDeserialized(cm *compiledModule) {
	if len(cm.executable) > 0 {
		_ = platform.MunmapCodeSegment(cm.executable)
		cm.executable = nil
	}
}

// (fledge patch) Not upstream's "WAZEVO": entries of this format (page-aligned code, an
// entry checksum, CRC-32 IEEE) have keys and a magic of their own, so that no build of
// wazero reads an entry of another format ("WAZEVF" was this format with CRC-32C).
var magic = []byte{'W', 'A', 'Z', 'E', 'V', 'G'}

// (fledge patch) Two changes to upstream's format:
//
//   - After the length of the code, a 4-byte pad length and that many zero bytes, so that the
//     code starts at a multiple of the writer's page size: on Linux a reader with the same
//     page size maps it from the file (platform.MmapCodeFile) instead of copying 4x the
//     module's size into fresh memory, which cost more than the rest of a cache hit.
//   - The entry ends with a checksum (CRC-32, 4 bytes) of the entry's cache key followed by
//     every byte of the entry before it except the code, which its own checksum covers: an
//     entry that is truncated, corrupt anywhere (not only in its code), or was written for
//     another module (another key) does not load.
//
// Checksums are not signatures: the cache directory must be writable by its owner only
// (NewCompilationCacheWithDir), and its entries are never written in place.

// maxCodePad bounds the pad before the code (the largest page size it aligns to).
const maxCodePad = 1 << 20

func serializeCompiledModule(wazeroVersion string, key filecache.Key, cm *compiledModule) io.Reader {
	buf := bytes.NewBuffer(nil)
	// First 6 byte: WAZEVO header.
	buf.Write(magic)
	// Next 1 byte: length of version:
	buf.WriteByte(byte(len(wazeroVersion)))
	// Version of wazero.
	buf.WriteString(wazeroVersion)
	// Number of *code (== locally defined functions in the module): 4 bytes.
	buf.Write(u32.LeBytes(uint32(len(cm.functionOffsets))))
	for _, offset := range cm.functionOffsets {
		// The offset of this function in the executable (8 bytes).
		buf.Write(u64.LeBytes(uint64(offset)))
	}
	// The length of code segment (8 bytes).
	buf.Write(u64.LeBytes(uint64(len(cm.executable))))
	// (fledge patch) The pad that aligns the code to a page.
	page := os.Getpagesize()
	pad := (page - (buf.Len()+4)%page) % page
	buf.Write(u32.LeBytes(uint32(pad)))
	buf.Write(make([]byte, pad))
	// Append the native code.
	execStart := buf.Len()
	buf.Write(cm.executable)
	execEnd := buf.Len()
	// Append checksum.
	checksum := crc32.Checksum(cm.executable, crc)
	buf.Write(u32.LeBytes(checksum))
	if sm := cm.sourceMap; len(sm.executableOffsets) > 0 {
		buf.WriteByte(1) // indicates that source map is present.
		l := len(sm.wasmBinaryOffsets)
		buf.Write(u64.LeBytes(uint64(l)))
		executableAddr := uintptr(unsafe.Pointer(&cm.executable[0]))
		for i := 0; i < l; i++ {
			buf.Write(u64.LeBytes(sm.wasmBinaryOffsets[i]))
			// executableOffsets is absolute address, so we need to subtract executableAddr.
			buf.Write(u64.LeBytes(uint64(sm.executableOffsets[i] - executableAddr)))
		}
	} else {
		buf.WriteByte(0) // indicates that source map is not present.
	}
	// Catch clause table: number of try_tables (4 bytes), then for each:
	//   clause count (4 bytes), then for each clause: kind (1 byte) + tagIndex (4 bytes).
	buf.Write(u32.LeBytes(uint32(len(cm.catchClauseTable))))
	for _, clauses := range cm.catchClauseTable {
		buf.Write(u32.LeBytes(uint32(len(clauses))))
		for _, c := range clauses {
			buf.WriteByte(c.Kind)
			buf.Write(u32.LeBytes(c.TagIndex))
		}
	}
	// (fledge patch) The entry's checksum.
	b := buf.Bytes()
	sum := crc32.Update(crc32.Update(crc32.Checksum(key[:], crc), crc, b[:execStart]), crc, b[execEnd:])
	buf.Write(u32.LeBytes(sum))
	return bytes.NewReader(buf.Bytes())
}

// errCorruptEntry is returned for an entry whose checksum or structure is wrong. (fledge patch)
var errCorruptEntry = errors.New("compilationcache: corrupt entry")

// entryReader reads an entry through a buffer, checksums what it reads and counts it.
// (fledge patch)
type entryReader struct {
	r   *bufio.Reader
	sum hash.Hash32
	off int64
}

func (er *entryReader) Read(p []byte) (int, error) {
	n, err := er.r.Read(p)
	er.sum.Write(p[:n])
	er.off += int64(n)
	return n, err
}

func deserializeCompiledModule(wazeroVersion string, key filecache.Key, entry io.ReadCloser) (cm *compiledModule, staleCache bool, err error) {
	defer entry.Close()
	// (fledge patch) The size of the entry bounds every count and length in it, so that a
	// corrupt one cannot make this allocate or map more than the entry holds.
	size := int64(1<<63 - 1)
	file, _ := entry.(*os.File)
	if file != nil {
		if st, err := file.Stat(); err == nil {
			size = st.Size()
		} else {
			file = nil
		}
	}
	reader := &entryReader{r: bufio.NewReaderSize(entry, 64<<10), sum: crc32.New(crc)}
	reader.sum.Write(key[:])
	var executable []byte // mapped: unmapped again unless this returns it
	defer func() {
		if (err != nil || staleCache) && len(executable) > 0 {
			_ = platform.MunmapCodeSegment(executable)
			cm = nil
		}
	}()
	cacheHeaderSize := len(magic) + 1 /* version size */ + len(wazeroVersion) + 4 /* number of functions */

	// Read the header before the native code.
	header := make([]byte, cacheHeaderSize)
	n, err := io.ReadFull(reader, header)
	if err != nil {
		return nil, false, fmt.Errorf("compilationcache: error reading header: %v", err)
	}

	if n != cacheHeaderSize {
		return nil, false, fmt.Errorf("compilationcache: invalid header length: %d", n)
	}

	if !bytes.Equal(header[:len(magic)], magic) {
		return nil, false, fmt.Errorf(
			"compilationcache: invalid magic number: got %s but want %s", magic, header[:len(magic)])
	}

	// Check the version compatibility.
	versionSize := int(header[len(magic)])

	cachedVersionBegin, cachedVersionEnd := len(magic)+1, len(magic)+1+versionSize
	if cachedVersionEnd >= len(header) {
		staleCache = true
		return
	} else if cachedVersion := string(header[cachedVersionBegin:cachedVersionEnd]); cachedVersion != wazeroVersion {
		staleCache = true
		return
	}

	functionsNum := binary.LittleEndian.Uint32(header[len(header)-4:])
	if int64(functionsNum)*8 > size {
		return nil, false, fmt.Errorf("%w: %d functions in %d bytes", errCorruptEntry, functionsNum, size)
	}
	cm = &compiledModule{functionOffsets: make([]int, functionsNum), executables: &executables{}}

	var eightBytes [8]byte
	for i := uint32(0); i < functionsNum; i++ {
		// Read the offset of each function in the executable.
		var offset uint64
		if offset, err = readUint64(reader, &eightBytes); err != nil {
			err = fmt.Errorf("compilationcache: error reading func[%d] executable offset: %v", i, err)
			return
		}
		cm.functionOffsets[i] = int(offset)
	}

	executableLen, err := readUint64(reader, &eightBytes)
	if err != nil {
		err = fmt.Errorf("compilationcache: error reading executable size: %v", err)
		return
	}
	if executableLen > uint64(size) {
		return nil, false, fmt.Errorf("%w: %d bytes of code in %d bytes", errCorruptEntry, executableLen, size)
	}
	for _, offset := range cm.functionOffsets {
		if offset < 0 || uint64(offset) >= executableLen {
			return nil, false, fmt.Errorf("%w: function offset %d out of %d bytes of code", errCorruptEntry, offset, executableLen)
		}
	}

	// (fledge patch) The pad before the code.
	if _, err = io.ReadFull(reader, eightBytes[:4]); err != nil {
		return nil, false, fmt.Errorf("compilationcache: error reading code pad: %v", err)
	}
	pad := binary.LittleEndian.Uint32(eightBytes[:4])
	if pad > maxCodePad || int64(pad) > size {
		return nil, false, fmt.Errorf("%w: a code pad of %d bytes", errCorruptEntry, pad)
	}
	if _, err = io.CopyN(io.Discard, reader, int64(pad)); err != nil {
		return nil, false, fmt.Errorf("compilationcache: error reading code pad: %v", err)
	}

	if reader.off+int64(executableLen) > size {
		return nil, false, fmt.Errorf("%w: %d bytes of code past its end", errCorruptEntry, executableLen)
	}

	if executableLen > 0 {
		// Mapped from the file where it is page-aligned, else copied into fresh memory; not
		// through the entry's checksum either way: the executable has its own.
		if file != nil && reader.off%int64(os.Getpagesize()) == 0 {
			if executable, err = platform.MmapCodeFile(file, reader.off, int(executableLen)); err == nil {
				if _, err = file.Seek(reader.off+int64(executableLen), io.SeekStart); err != nil {
					return nil, false, fmt.Errorf("compilationcache: %v", err)
				}
				reader.r.Reset(file)
			} else {
				executable = nil
			}
		}
		if executable == nil {
			executable, err = platform.MmapCodeSegment(int(executableLen))
			if err != nil {
				err = fmt.Errorf("compilationcache: error mmapping executable (len=%d): %v", executableLen, err)
				return nil, false, err
			}
			_, err = io.ReadFull(reader.r, executable)
			if err != nil {
				err = fmt.Errorf("compilationcache: error reading executable (len=%d): %v", executableLen, err)
				return nil, false, err
			}
		}

		expected := crc32.Checksum(executable, crc)
		if _, err = io.ReadFull(reader, eightBytes[:4]); err != nil {
			return nil, false, fmt.Errorf("compilationcache: could not read checksum: %v", err)
		} else if checksum := binary.LittleEndian.Uint32(eightBytes[:4]); expected != checksum {
			return nil, false, fmt.Errorf("compilationcache: checksum mismatch (expected %d, got %d)", expected, checksum)
		}
		cm.executable = executable
	} else if _, err = io.ReadFull(reader, eightBytes[:4]); err != nil {
		return nil, false, fmt.Errorf("compilationcache: could not read checksum: %v", err)
	}

	if _, err := io.ReadFull(reader, eightBytes[:1]); err != nil {
		return nil, false, fmt.Errorf("compilationcache: error reading source map presence: %v", err)
	}

	if eightBytes[0] == 1 {
		if len(cm.executable) == 0 {
			return nil, false, fmt.Errorf("%w: a source map without code", errCorruptEntry)
		}
		sm := &cm.sourceMap
		sourceMapLen, err := readUint64(reader, &eightBytes)
		if err != nil {
			err = fmt.Errorf("compilationcache: error reading source map length: %v", err)
			return nil, false, err
		}
		if sourceMapLen > uint64(size)/16 {
			return nil, false, fmt.Errorf("%w: %d source map entries in %d bytes", errCorruptEntry, sourceMapLen, size)
		}
		executableOffset := uintptr(unsafe.Pointer(&cm.executable[0]))
		for i := uint64(0); i < sourceMapLen; i++ {
			wasmBinaryOffset, err := readUint64(reader, &eightBytes)
			if err != nil {
				err = fmt.Errorf("compilationcache: error reading source map[%d] wasm binary offset: %v", i, err)
				return nil, false, err
			}
			executableRelativeOffset, err := readUint64(reader, &eightBytes)
			if err != nil {
				err = fmt.Errorf("compilationcache: error reading source map[%d] executable offset: %v", i, err)
				return nil, false, err
			}
			sm.wasmBinaryOffsets = append(sm.wasmBinaryOffsets, wasmBinaryOffset)
			// executableOffsets is absolute address, so we need to add executableOffset.
			sm.executableOffsets = append(sm.executableOffsets, uintptr(executableRelativeOffset)+executableOffset)
		}
	} else if eightBytes[0] != 0 {
		return nil, false, fmt.Errorf("%w: source map flag %d", errCorruptEntry, eightBytes[0])
	}
	// Catch clause table.
	if _, err = io.ReadFull(reader, eightBytes[:4]); err != nil {
		// Treat old cache entries without catch clause data as stale (trigger recompile).
		return nil, true, nil
	}
	tableLen := binary.LittleEndian.Uint32(eightBytes[:4])
	if int64(tableLen)*4 > size {
		return nil, false, fmt.Errorf("%w: %d try_tables in %d bytes", errCorruptEntry, tableLen, size)
	}
	if tableLen > 0 {
		cm.catchClauseTable = make([][]wazevoapi.CatchClauseInstance, tableLen)
		for i := uint32(0); i < tableLen; i++ {
			if _, err = io.ReadFull(reader, eightBytes[:4]); err != nil {
				return nil, false, fmt.Errorf("compilationcache: error reading catch clause count for try_table[%d]: %v", i, err)
			}
			clauseCount := binary.LittleEndian.Uint32(eightBytes[:4])
			if int64(clauseCount)*5 > size {
				return nil, false, fmt.Errorf("%w: %d catch clauses in %d bytes", errCorruptEntry, clauseCount, size)
			}
			clauses := make([]wazevoapi.CatchClauseInstance, clauseCount)
			for j := uint32(0); j < clauseCount; j++ {
				if _, err = io.ReadFull(reader, eightBytes[:5]); err != nil {
					return nil, false, fmt.Errorf("compilationcache: error reading catch clause[%d][%d]: %v", i, j, err)
				}
				clauses[j] = wazevoapi.CatchClauseInstance{
					Kind:     eightBytes[0],
					TagIndex: binary.LittleEndian.Uint32(eightBytes[1:5]),
				}
			}
			cm.catchClauseTable[i] = clauses
		}
	}
	// (fledge patch) The entry's checksum, and nothing after it; only then is the code
	// made executable.
	want := reader.sum.Sum32()
	if _, err = io.ReadFull(reader.r, eightBytes[:4]); err != nil {
		return nil, true, nil // an entry of the format without it: stale
	} else if got := binary.LittleEndian.Uint32(eightBytes[:4]); got != want {
		return nil, false, fmt.Errorf("%w: entry checksum mismatch (expected %d, got %d)", errCorruptEntry, want, got)
	}
	if _, err = reader.r.ReadByte(); err != io.EOF {
		return nil, false, fmt.Errorf("%w: bytes after its end", errCorruptEntry)
	}
	err = nil
	if len(cm.executable) > 0 {
		if err = platform.MprotectCodeSegment(cm.executable); err != nil {
			return nil, false, err
		}
	}
	return
}

// readUint64 strictly reads an uint64 in little-endian byte order, using the
// given array as a buffer. This returns io.EOF if less than 8 bytes were read.
func readUint64(reader io.Reader, b *[8]byte) (uint64, error) {
	s := b[0:8]
	if _, err := io.ReadFull(reader, s); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = io.EOF
		}
		return 0, err
	}

	// Read the u64 from the underlying buffer.
	ret := binary.LittleEndian.Uint64(s)
	return ret, nil
}
