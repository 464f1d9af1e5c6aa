// SPDX-License-Identifier: MIT

package audit

import (
	"encoding/json"
	"testing"
)

func TestOCSFNetworkActivity(t *testing.T) {
	r := &Record{Event: EventNetConnect, Decision: Deny, Reason: "capability_not_granted",
		Details: map[string]any{"host": "evil.test", "port": json.Number("443"), "address": "192.0.2.1", "proto": "tcp", "why": "not_granted"}}
	o := OCSF(r, ExportOptions{})
	if o["class_uid"] != 4001 || o["activity_name"] != "Refuse" || o["type_uid"] != 400105 {
		t.Fatalf("class %v activity %v type %v", o["class_uid"], o["activity_name"], o["type_uid"])
	}
	dst := o["dst_endpoint"].(map[string]any)
	if dst["hostname"] != "evil.test" || dst["ip"] != "192.0.2.1" || dst["port"] != int64(443) {
		t.Fatalf("dst %v", dst)
	}
	r = &Record{Event: EventNetClose, Decision: Allow, Details: map[string]any{"bytes_out": json.Number("10"), "bytes_in": json.Number("20")}}
	o = OCSF(r, ExportOptions{})
	if o["activity_name"] != "Close" || o["traffic"].(map[string]any)["bytes_in"] != int64(20) {
		t.Fatalf("close %v", o)
	}
	r = &Record{Event: EventNetDNS, Decision: Deny, Details: map[string]any{"host": "x.test", "qtype": "A"}}
	if o = OCSF(r, ExportOptions{}); o["class_uid"] != 4003 || o["query"].(map[string]any)["hostname"] != "x.test" {
		t.Fatalf("dns %v", o)
	}
	r = &Record{Event: EventExecDecision, Decision: Allow}
	if o = OCSF(r, ExportOptions{}); o["class_uid"] != 1007 {
		t.Fatal("exec records stay Process Activity")
	}
}
