//go:build wasip1

// probe is the test guest for everything that needs only send, recv and exit (plus WASI):
// init's first argument picks what it does.
package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/fledgehq/fledge/sandbox/wasm/testdata/guests/abi"
)

func report(v any) {
	b, _ := json.Marshal(v)
	abi.Output(string(b) + "\n")
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

func main() {
	in := abi.ReadInit()
	if len(in.Args) == 0 {
		abi.Output("no mode\n")
		abi.Exit(2)
	}
	switch in.Args[0] {
	case "hello":
		abi.Output("hello from wasm\n")
		fmt.Print("stdout: h\u00e9llo w\u00f6rld\n")
		abi.Exit(0)
	case "exit":
		var code int
		fmt.Sscan(in.Args[1], &code)
		abi.Exit(code)
	case "return":
		// main returns: Go's runtime calls proc_exit(0).
		abi.Output("returning\n")
	case "panic":
		panic("guest panicked on purpose")
	case "messages":
		messages()
	case "bigreply":
		bigreply(in.Args[1])
	case "loop":
		abi.Output("looping\n")
		n := 0
		for {
			n++
		}
	case "sleep":
		abi.Output("sleeping\n")
		time.Sleep(time.Hour)
	case "memhog":
		var keep [][]byte
		for {
			b := make([]byte, 1<<20)
			for i := range b {
				b[i] = 1
			}
			keep = append(keep, b)
		}
	case "attack":
		attack(in.Args[1:])
	case "fifo":
		fifo(in.Args[1:])
	case "flood":
		// Output until the host's write blocks: nobody reads the other end.
		line := strings.Repeat("x", 1<<10) + "\n"
		for {
			fmt.Print(line)
		}
	}
}

func messages() {
	abi.Send(map[string]any{"type": "output", "text": "out-1\n"})
	abi.Send(map[string]any{"type": "log", "level": "warn", "message": "log-1"})
	abi.Send(map[string]any{"type": "progress", "message": "step", "current": 1, "total": 2})
	abi.Send(map[string]any{"type": "progress", "done": true})
	abi.Send(map[string]any{"type": "store", "key": "k1", "value": "v1"})
	// Pretty-printed JSON is one message too.
	abi.SendRaw([]byte("{\n  \"type\": \"output\",\n  \"text\": \"pretty\\n\"\n}"))
	abi.SendRaw([]byte("{not json"))
	abi.Send(map[string]any{"type": "output", "id": "fledge-wasm-1", "text": "reserved id\n"})
	fmt.Print("via-stdout\n")
	reqs := []map[string]any{
		{"type": "load", "id": "l1", "key": "k1"},
		{"type": "prompt", "id": "p1", "message": "name?"},
		{"type": "confirm", "id": "c1", "message": "sure?"},
		{"type": "select", "id": "s1", "message": "pick", "options": []string{"a", "b"}},
		{"type": "multi_select", "id": "m1", "message": "pick", "options": []string{"a", "b"}},
		{"type": "metadata", "id": "md1", "keys": []string{"fledge_config"}},
		{"type": "exec", "id": "e1", "command": "echo from-exec"},
	}
	for _, r := range reqs {
		abi.Send(r)
	}
	replies := map[string]json.RawMessage{}
	for len(replies) < len(reqs) {
		m, _ := abi.Recv(4096)
		if m == nil {
			break
		}
		var e struct {
			Type string          `json:"type"`
			ID   string          `json:"id"`
			All  json.RawMessage `json:"-"`
		}
		if json.Unmarshal(m, &e) != nil || e.ID == "" {
			continue
		}
		replies[e.ID] = json.RawMessage(m)
	}
	// Nothing is outstanding now: recv returns 0 at once.
	empty := len(abi.RecvChunk(64))
	report(map[string]any{"replies": replies, "empty_recv": empty})
	abi.Exit(0)
}

func bigreply(cmd string) {
	abi.Send(map[string]any{"type": "exec", "id": "big", "command": cmd})
	m, calls := abi.Recv(1000)
	var e struct {
		Value struct {
			Code   int    `json:"code"`
			Stdout string `json:"stdout"`
		} `json:"value"`
	}
	err := json.Unmarshal(m, &e)
	report(map[string]any{"len": len(m), "calls": calls, "parse": errText(err), "code": e.Value.Code, "stdout_len": len(e.Value.Stdout)})
	abi.Exit(0)
}

// attack tries to get out from inside the module: args are the host's home dir, a host
// file outside every preopen, and a loopback address a test server listens on.
func attack(args []string) {
	home, outside, addr := args[0], args[1], args[2]
	r := map[string]string{}
	r["env_count"] = fmt.Sprint(len(os.Environ()))
	r["arg_count"] = fmt.Sprint(len(os.Args))
	read := func(name, p string) {
		_, err := os.ReadFile(p)
		r["read "+name] = errText(err)
	}
	list := func(name, p string) {
		_, err := os.ReadDir(p)
		r["list "+name] = errText(err)
	}
	write := func(name, p string) {
		err := os.WriteFile(p, []byte("pwned"), 0o644)
		r["write "+name] = errText(err)
	}
	read("/etc/passwd", "/etc/passwd")
	read("/etc/hosts", "/etc/hosts")
	read("outside", outside)
	read("home", filepath.Join(home, "secret"))
	read("../../../etc/passwd", "../../../etc/passwd")
	read("/plugin/../../../etc/passwd", "/plugin/../../../etc/passwd")
	read("/project/../../../etc/passwd", "/project/../../../etc/passwd")
	read("/plugin/escape-link", "/plugin/escape-link")
	read("/project/marker.txt", "/project/marker.txt")
	list("/", "/")
	list("/tmp", "/tmp")
	list("/etc", "/etc")
	list("home", home)
	list("/plugin", "/plugin")
	write("/tmp", "/tmp/wasm-pwned")
	write("/", "/wasm-pwned")
	write("relative", "wasm-pwned")
	write("home", filepath.Join(home, "wasm-pwned"))
	write("/project", "/project/wasm-pwned")
	write("/plugin/..", "/plugin/../wasm-pwned")
	write("/plugin", "/plugin/ok.txt")
	r["mkdir /plugin/sub"] = errText(os.Mkdir("/plugin/sub", 0o755))
	r["symlink /plugin/link"] = errText(os.Symlink("/etc/passwd", "/plugin/link"))
	r["symlink relative"] = errText(os.Symlink("../../../../etc/passwd", "/plugin/link2"))
	_, err := os.StartProcess("/bin/sh", []string{"sh", "-c", "echo pwned"}, &os.ProcAttr{})
	r["spawn /bin/sh"] = errText(err)
	r["spawn echo"] = errText(exec.Command("echo", "pwned").Run())
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if c != nil {
		c.Close()
	}
	r["dial tcp"] = errText(err)
	// Go's wasip1 net package has an in-module fake network: a listener on the host
	// listener's own port and a dial to it stay inside the module.
	l, err := net.Listen("tcp", addr)
	r["listen tcp (in-module)"] = errText(err)
	if l != nil {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if c != nil {
			c.Close()
		}
		r["dial after listen (in-module)"] = errText(err)
		l.Close()
	}
	report(r)
	abi.Exit(0)
}

// fifo opens the FIFOs a test made in the project and the data dir: opening one blocks
// until its other end is opened, so an open that reached the host's open(2) as is would
// never return. A regular file beside them is the positive control. With "spin" it then
// loops until it is stopped.
func fifo(args []string) {
	abi.Output("opening fifos\n")
	r := map[string]string{}
	start := time.Now()
	open := func(name, p string, flag int) {
		f, err := os.OpenFile(p, flag, 0)
		if f != nil {
			f.Close()
		}
		r[name] = errText(err)
	}
	open("read /project/fifo", "/project/fifo", os.O_RDONLY)
	open("write /plugin/fifo", "/plugin/fifo", os.O_WRONLY)
	open("read /plugin/fifo", "/plugin/fifo", os.O_RDONLY)
	open("read /project/marker.txt", "/project/marker.txt", os.O_RDONLY)
	r["elapsed_ms"] = fmt.Sprint(time.Since(start).Milliseconds())
	report(r)
	if len(args) > 0 && args[0] == "spin" {
		abi.Output("spinning\n")
		n := 0
		for {
			n++
		}
	}
	abi.Exit(0)
}
