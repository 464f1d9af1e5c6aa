// SPDX-License-Identifier: MIT

// Package otlp ships the audit log to an OpenTelemetry collector over OTLP/HTTP (protobuf or
// JSON): every record becomes one OTLP log record whose body is the record's line exactly as
// stored. The log itself is the outbox (audit.ReadAfter, audit.Outbox): what was
// acknowledged is a cursor beside the log, so a crash, a killed process or a collector that
// is down loses nothing; records are sent at least once, in the log's order.
package otlp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	collogs "go.opentelemetry.io/proto/slim/otlp/collector/logs/v1"
	commonpb "go.opentelemetry.io/proto/slim/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/slim/otlp/logs/v1"
	resourcepb "go.opentelemetry.io/proto/slim/otlp/resource/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/fledgehq/fledge/audit"
)

// Protocols of OTLP/HTTP.
const (
	ProtocolProtobuf = "http/protobuf"
	ProtocolJSON     = "http/json"
)

const (
	// DefaultEndpoint is where a collector listens for OTLP/HTTP by default.
	DefaultEndpoint = "http://localhost:4318"
	// LogsPath is the logs signal's path, added to an endpoint given without one.
	LogsPath = "/v1/logs"
	// DefaultTimeout bounds one request.
	DefaultTimeout = 10 * time.Second
	// MaxBatchRecords and MaxBatchBytes bound one request.
	MaxBatchRecords = 512
	MaxBatchBytes   = 1 << 20
	// maxResponseBytes bounds what is read of a collector's answer.
	maxResponseBytes = 64 << 10
	// ScopeName names the instrumentation scope of every log record.
	ScopeName = "github.com/fledgehq/fledge/audit"
)

var (
	// ErrConfig: the export settings are unusable.
	ErrConfig = errors.New("bad OTLP export configuration")
	// ErrRefused: the collector answered, but not with success.
	ErrRefused = errors.New("the collector refused the records")
	// ErrUnreachable: no answer (connection refused, timeout, broken connection).
	ErrUnreachable = errors.New("the collector did not answer")
)

// Config is where and how records are sent.
type Config struct {
	// URL is the full logs URL (Endpoint resolves it).
	URL      string
	Protocol string
	// Headers are sent with every request (an API key): values come from the secrets store
	// and appear in no record and no message.
	Headers map[string]string
	// ServiceVersion is fledge's version (resource service.version); empty leaves it out.
	ServiceVersion string
	// Timeout bounds one request; 0 = DefaultTimeout.
	Timeout time.Duration
}

// Endpoint resolves the logs URL: the configured endpoint, else OTEL_EXPORTER_OTLP_LOGS_ENDPOINT
// (used as is), else OTEL_EXPORTER_OTLP_ENDPOINT, else DefaultEndpoint. An endpoint without a
// path gets LogsPath, as the OpenTelemetry exporters do for the base endpoint.
func Endpoint(configured string, getenv func(string) string) (string, error) {
	raw, exact := configured, false
	if raw == "" {
		if v := getenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"); v != "" {
			raw, exact = v, true
		} else if v := getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); v != "" {
			raw = strings.TrimSuffix(v, "/") + LogsPath
			exact = true
		} else {
			raw = DefaultEndpoint
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("%w: endpoint %q: %v", ErrConfig, raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%w: endpoint %q: want an http:// or https:// URL", ErrConfig, raw)
	}
	if u.Host == "" || u.User != nil {
		return "", fmt.Errorf("%w: endpoint %q: want http(s)://host:port, without user info (put an API key in otlp_headers)", ErrConfig, raw)
	}
	if !exact && (u.Path == "" || u.Path == "/") {
		u.Path = LogsPath
	}
	return u.String(), nil
}

// CheckProtocol accepts "" (protobuf), http/protobuf and http/json.
func CheckProtocol(p string) (string, error) {
	switch p {
	case "", ProtocolProtobuf:
		return ProtocolProtobuf, nil
	case ProtocolJSON:
		return ProtocolJSON, nil
	}
	return "", fmt.Errorf("%w: protocol %q (want %s or %s)", ErrConfig, p, ProtocolProtobuf, ProtocolJSON)
}

// Client sends batches to one collector.
type Client struct {
	cfg  Config
	http *http.Client
}

// NewClient checks cfg and returns its client.
func NewClient(cfg Config) (*Client, error) {
	var err error
	if cfg.Protocol, err = CheckProtocol(cfg.Protocol); err != nil {
		return nil, err
	}
	if cfg.URL == "" {
		return nil, fmt.Errorf("%w: no endpoint", ErrConfig)
	}
	for k := range cfg.Headers {
		if k == "" || strings.ContainsAny(k, " :\r\n\t") {
			return nil, fmt.Errorf("%w: header name %q", ErrConfig, k)
		}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	return &Client{cfg: cfg, http: &http.Client{
		Timeout: cfg.Timeout,
		// The headers carry an API key: a redirect would carry it elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}, nil
}

// URL is where the client sends.
func (c *Client) URL() string { return c.cfg.URL }

// Send posts one batch and returns once the collector acknowledged it (2xx). A partial
// success (records the collector dropped by its own choice) is still an acknowledgement:
// sending them again would not change its mind; the returned count says how many.
func (c *Client) Send(ctx context.Context, batch []audit.Entry) (rejected int64, err error) {
	body, ctype, err := c.encode(batch)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("User-Agent", "fledge-audit-export")
	for k, v := range c.cfg.Headers {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// The URL is ours; the error text names no header.
		return 0, fmt.Errorf("%w: %s: %v", ErrUnreachable, c.cfg.URL, errors.Unwrap(err))
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return 0, &RefusedError{Status: resp.StatusCode, RetryAfter: retryAfter(resp.Header.Get("Retry-After")), Message: statusMessage(rb, resp.Header.Get("Content-Type"))}
	}
	var out collogs.ExportLogsServiceResponse
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		_ = protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(rb, &out)
	} else {
		_ = proto.Unmarshal(rb, &out)
	}
	return out.GetPartialSuccess().GetRejectedLogRecords(), nil
}

// RefusedError is a collector's non-2xx answer.
type RefusedError struct {
	Status     int
	RetryAfter time.Duration
	Message    string
}

func (e *RefusedError) Error() string {
	msg := fmt.Sprintf("%v: HTTP %d", ErrRefused, e.Status)
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

func (e *RefusedError) Unwrap() error { return ErrRefused }

func retryAfter(v string) time.Duration {
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n > 0 {
		return time.Duration(min(n, 3600)) * time.Second
	}
	return 0
}

// statusMessage is the message of an OTLP error answer (a google.rpc.Status), cut short.
func statusMessage(b []byte, ctype string) string {
	var msg string
	if strings.HasPrefix(ctype, "application/x-protobuf") {
		// google.rpc.Status: field 2 is the message; read it without the type.
		var st collogs.ExportLogsPartialSuccess // fields 1 (int64) and 2 (string) share the shape
		if proto.Unmarshal(b, &st) == nil {
			msg = st.GetErrorMessage()
		}
	} else {
		msg = string(b)
	}
	msg = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, msg)
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	return strings.TrimSpace(msg)
}

func (c *Client) encode(batch []audit.Entry) ([]byte, string, error) {
	req := &collogs.ExportLogsServiceRequest{ResourceLogs: ResourceLogs(batch, c.cfg.ServiceVersion)}
	if c.cfg.Protocol == ProtocolJSON {
		// OTLP/JSON: enums as numbers; field names lowerCamelCase (protojson's default).
		b, err := protojson.MarshalOptions{UseEnumNumbers: true}.Marshal(req)
		return b, "application/json", err
	}
	b, err := proto.Marshal(req)
	return b, "application/x-protobuf", err
}

// ResourceLogs maps a batch, in order: one resource per run of records from one host
// (service.name fledge, host.name), one log record per audit record.
func ResourceLogs(batch []audit.Entry, version string) []*logspb.ResourceLogs {
	var out []*logspb.ResourceLogs
	var cur *logspb.ScopeLogs
	host := ""
	for i, e := range batch {
		if i == 0 || e.Record.Host != host {
			host = e.Record.Host
			attrs := []*commonpb.KeyValue{str("service.name", "fledge"), str("host.name", host)}
			if version != "" {
				attrs = append(attrs, str("service.version", version))
			}
			cur = &logspb.ScopeLogs{Scope: &commonpb.InstrumentationScope{Name: ScopeName, Version: strconv.Itoa(audit.SchemaVersion)}}
			out = append(out, &logspb.ResourceLogs{
				Resource:  &resourcepb.Resource{Attributes: attrs},
				ScopeLogs: []*logspb.ScopeLogs{cur},
			})
		}
		cur.LogRecords = append(cur.LogRecords, LogRecord(e.Record, e.Line))
	}
	return out
}

// LogRecord maps one audit record: the body is its line as stored, the attributes its main
// fields and its OCSF class.
func LogRecord(r *audit.Record, line []byte) *logspb.LogRecord {
	sev, sevText := logspb.SeverityNumber_SEVERITY_NUMBER_INFO, "INFO"
	switch r.Decision {
	case audit.Deny:
		sev, sevText = logspb.SeverityNumber_SEVERITY_NUMBER_WARN, "WARN"
	case audit.Error:
		sev, sevText = logspb.SeverityNumber_SEVERITY_NUMBER_ERROR, "ERROR"
	}
	attrs := []*commonpb.KeyValue{
		str("fledge.event", r.Event),
		num("fledge.seq", int64(r.Seq)),
		str("fledge.decision", string(r.Decision)),
		str("fledge.reason", r.Reason),
		str("fledge.hash", r.Hash),
		num("fledge.uid", int64(r.UID)),
		num("fledge.pid", int64(r.PID)),
	}
	if r.Session != "" {
		attrs = append(attrs, str("fledge.session", r.Session))
	}
	if p := r.Plugin; p != nil {
		attrs = append(attrs, str("fledge.plugin", p.Name))
		if p.Version != "" {
			attrs = append(attrs, str("fledge.plugin.version", p.Version))
		}
		if p.Source != "" {
			attrs = append(attrs, str("fledge.plugin.source", p.Source))
		}
	}
	o := audit.OCSF(r, audit.ExportOptions{})
	if v, ok := o["class_uid"].(int); ok {
		attrs = append(attrs, num("ocsf.class_uid", int64(v)))
	}
	if v, ok := o["class_name"].(string); ok {
		attrs = append(attrs, str("ocsf.class_name", v))
	}
	if v, ok := o["activity_id"].(int); ok {
		attrs = append(attrs, num("ocsf.activity_id", int64(v)))
	}
	return &logspb.LogRecord{
		TimeUnixNano:         uint64(r.Time.UnixNano()),
		ObservedTimeUnixNano: uint64(time.Now().UnixNano()),
		SeverityNumber:       sev,
		SeverityText:         sevText,
		EventName:            r.Event,
		Body:                 &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: string(line)}},
		Attributes:           attrs,
	}
}

func str(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

func num(k string, v int64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}
