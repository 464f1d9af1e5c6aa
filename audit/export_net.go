package audit

// Network records of a plugin session (network by destination, package egress).
const (
	EventNetConnect = "net_connect"
	EventNetClose   = "net_close"
	EventNetDNS     = "net_dns"
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
	if r.Event == EventNetClose {
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
