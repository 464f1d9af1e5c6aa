// SPDX-License-Identifier: MIT

package audit

import "strings"

// Network records of a plugin session (network by destination, package egress).
const (
	EventNetConnect = "net_connect"
	EventNetClose   = "net_close"
	EventNetDNS     = "net_dns"
	EventNetHTTP    = "net_http"
)

// ocsfNetwork turns out (built as Process Activity) into OCSF Network Activity (class 4001:
// net_connect is Open or Refuse, net_close is Close) or DNS Activity (class 4003, Query) for
// the network records; other records are left as they are.
func ocsfNetwork(r *Record, out map[string]any) {
	var class, act int
	var className, actName string
	switch {
	case r.Event == EventNetConnect && r.Decision == Deny:
		class, className, act, actName = 4001, "Network Activity", 5, "Refuse"
	case r.Event == EventNetConnect:
		class, className, act, actName = 4001, "Network Activity", 1, "Open"
	case r.Event == EventNetClose:
		class, className, act, actName = 4001, "Network Activity", 2, "Close"
	case r.Event == EventNetDNS:
		class, className, act, actName = 4003, "DNS Activity", 1, "Query"
	case r.Event == EventNetHTTP:
		class, className = 4002, "HTTP Activity"
		act, actName = httpActivity(r.Details["method"])
	default:
		return
	}
	out["class_uid"], out["class_name"] = class, className
	out["category_uid"], out["category_name"] = 4, "Network Activity"
	out["activity_id"], out["activity_name"] = act, actName
	out["type_uid"], out["type_name"] = class*100+act, className+": "+actName
	host, _ := r.Details["host"].(string)
	if class == 4003 {
		q := map[string]any{"hostname": host}
		if t, ok := r.Details["qtype"].(string); ok {
			q["type"] = t
		}
		out["query"] = q
		if a, ok := r.Details["address"].(string); ok {
			out["answers"] = []map[string]any{{"rdata": a, "type": "A"}}
		}
		return
	}
	dst := map[string]any{}
	if host != "" {
		dst["hostname"] = host
	}
	if a, ok := r.Details["address"].(string); ok {
		dst["ip"] = a
	}
	if p, ok := detailInt(r.Details["port"]); ok {
		dst["port"] = p
	}
	out["dst_endpoint"] = dst
	if proto, ok := r.Details["proto"].(string); ok {
		out["connection_info"] = map[string]any{"protocol_name": proto}
	}
	if class == 4002 {
		req := map[string]any{}
		if m, ok := r.Details["method"].(string); ok {
			req["http_method"] = m
		}
		u := map[string]any{"hostname": host}
		if p, ok := r.Details["path"].(string); ok {
			u["path"] = p
		}
		if p, ok := detailInt(r.Details["port"]); ok {
			u["port"] = p
		}
		req["url"] = u
		out["http_request"] = req
		if st, ok := detailInt(r.Details["status"]); ok {
			out["http_response"] = map[string]any{"code": st}
		}
	}
	if r.Event == EventNetClose || r.Event == EventNetHTTP {
		t := map[string]any{}
		if n, ok := detailInt(r.Details["bytes_out"]); ok {
			t["bytes_out"] = n
		}
		if n, ok := detailInt(r.Details["bytes_in"]); ok {
			t["bytes_in"] = n
		}
		out["traffic"] = t
	}
}

// httpActivity is OCSF HTTP Activity's activity for a method (99 Other for the rest).
func httpActivity(m any) (int, string) {
	name, _ := m.(string)
	for i, n := range []string{"Connect", "Delete", "Get", "Head", "Options", "Post", "Put", "Trace", "Patch"} {
		if strings.EqualFold(n, name) {
			return i + 1, n
		}
	}
	return 99, "Other"
}
