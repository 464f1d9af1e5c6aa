// SPDX-License-Identifier: MIT

// Command otelcollector runs the OpenTelemetry Collector's own OTLP receiver
// (go.opentelemetry.io/collector/receiver/otlpreceiver) on a loopback address and appends
// every log record it accepts to a file, one JSON object a line. fledge's OTLP export tests
// run it as the collector a fleet would run: the real HTTP handler, protobuf and JSON
// decoding, and status codes, with nothing of fledge in it.
//
// It lives in a module of its own so fledge's go.mod does not carry the collector.
//
//	otelcollector -listen 127.0.0.1:PORT -out FILE [-header NAME]
//
// It prints "ready" on stdout once it accepts requests and runs until SIGTERM/SIGINT (or
// is killed). Each record is written to the file before the receiver answers, so a record
// the sender saw acknowledged is in the file.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configgrpc"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
)

// received is one log record as the test reads it back.
type received struct {
	Body       string         `json:"body"`
	Attributes map[string]any `json:"attributes"`
	Resource   map[string]any `json:"resource"`
	Scope      string         `json:"scope"`
	TimeNanos  int64          `json:"time_unix_nano"`
	Severity   string         `json:"severity"`
	// Header is the value of the -header request header the record came with.
	Header string `json:"header,omitempty"`
}

func main() {
	listen := flag.String("listen", "127.0.0.1:4318", "host:port to listen on (loopback)")
	out := flag.String("out", "", "file the received log records are appended to")
	header := flag.String("header", "", "a request header to record with each log record (the receiver's include_metadata)")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "otelcollector: -out is required")
		os.Exit(2)
	}
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "otelcollector:", err)
		os.Exit(1)
	}
	var mu sync.Mutex
	sink, err := consumer.NewLogs(func(ctx context.Context, ld plog.Logs) error {
		var buf []byte
		hv := ""
		if *header != "" {
			hv = strings.Join(client.FromContext(ctx).Metadata.Get(*header), ",")
		}
		rls := ld.ResourceLogs()
		for i := 0; i < rls.Len(); i++ {
			rl := rls.At(i)
			res := rl.Resource().Attributes().AsRaw()
			sls := rl.ScopeLogs()
			for j := 0; j < sls.Len(); j++ {
				sl := sls.At(j)
				lrs := sl.LogRecords()
				for k := 0; k < lrs.Len(); k++ {
					lr := lrs.At(k)
					b, err := json.Marshal(received{
						Body:       bodyString(lr.Body()),
						Attributes: lr.Attributes().AsRaw(),
						Resource:   res,
						Scope:      sl.Scope().Name(),
						TimeNanos:  int64(lr.Timestamp()),
						Severity:   lr.SeverityText(),
						Header:     hv,
					})
					if err != nil {
						return err
					}
					buf = append(append(buf, b...), '\n')
				}
			}
		}
		mu.Lock()
		defer mu.Unlock()
		// Written before the receiver answers: a SIGKILL of this process cannot lose it
		// (the page cache outlives the process; only the machine's crash would).
		_, err := f.Write(buf)
		return err
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "otelcollector:", err)
		os.Exit(1)
	}

	fact := otlpreceiver.NewFactory()
	cfg := fact.CreateDefaultConfig().(*otlpreceiver.Config)
	cfg.Protocols.GRPC = configoptional.None[configgrpc.ServerConfig]()
	http := cfg.Protocols.HTTP.GetOrInsertDefault()
	http.ServerConfig.NetAddr.Endpoint = *listen
	http.ServerConfig.IncludeMetadata = *header != ""
	ctx := context.Background()
	rcv, err := fact.CreateLogs(ctx, receivertest.NewNopSettings(fact.Type()), cfg, sink)
	if err != nil {
		fmt.Fprintln(os.Stderr, "otelcollector:", err)
		os.Exit(1)
	}
	if err := rcv.Start(ctx, componenttest.NewNopHost()); err != nil {
		fmt.Fprintln(os.Stderr, "otelcollector:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	_ = rcv.Shutdown(ctx)
	f.Close()
}

func bodyString(v pcommon.Value) string {
	if v.Type() == pcommon.ValueTypeStr {
		return v.Str()
	}
	return v.AsString()
}
