// SPDX-License-Identifier: Apache-2.0

package driver

import (
	"encoding/json"
	"strings"
	"testing"

	bootstrapapi "github.com/containerd/containerd/api/runtime/bootstrap/v1"
	"google.golang.org/protobuf/proto"
)

// FuzzParseStartReply feeds the start-reply parser any bytes a shim might print. Whatever it
// accepts must be an address the driver can dial safely, and must survive being stored as
// bootstrap.json and read back; whatever it refuses is refused with an error, not a panic.
func FuzzParseStartReply(f *testing.F) {
	const addr = "unix:///run/shimwalk/s/0123abcd"
	f.Add([]byte(addr))
	f.Add([]byte(addr + "\n"))
	f.Add([]byte(" \t" + addr))
	f.Add([]byte(`{"version":2,"address":"` + addr + `","protocol":"ttrpc"}`))
	f.Add([]byte(`{"version":3,"address":"` + addr + `"}` + "\n"))
	f.Add([]byte(`{"version":3,"address":"` + addr + `","protocol":"grpc"}`))
	f.Add([]byte(`{"address":"unix://"}`))
	f.Add([]byte(`{"address":`))
	f.Add([]byte("unix:///a\x00b"))
	f.Add([]byte("tcp://127.0.0.1:1"))
	f.Add([]byte{})
	f.Add([]byte{0x08, 0x03})
	for _, r := range []*bootstrapapi.BootstrapResult{
		{Version: 3, Address: addr, Protocol: "ttrpc"},
		{Version: 3, Address: addr},
		{Version: 2, Address: "unix:///x\ny", Protocol: "ttrpc"},
		{Version: 3, Address: addr, Protocol: "grpc"},
	} {
		data, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		b, err := ParseStartReply(out)
		if err != nil {
			if b != (Bootstrap{}) {
				t.Errorf("ParseStartReply(%q) failed (%v) but returned %+v", out, err, b)
			}
			if msg := err.Error(); strings.Contains(msg, "\x00") {
				t.Errorf("error carries a NUL byte: %q", msg)
			}
			return
		}
		path, ok := strings.CutPrefix(b.Address, "unix://")
		if !ok || path == "" || strings.ContainsAny(path, "\x00\n") {
			t.Errorf("ParseStartReply(%q) accepted address %q", out, b.Address)
		}
		if b.Protocol != "ttrpc" {
			t.Errorf("ParseStartReply(%q) accepted protocol %q", out, b.Protocol)
		}
		if b.SocketPath() != path {
			t.Errorf("SocketPath() = %q, want %q", b.SocketPath(), path)
		}
		// What WriteBootstrap stores, ReadBootstrap must read back unchanged.
		stored, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("encode %+v: %v", b, err)
		}
		again, err := ParseStartReply(stored)
		if err != nil || again != b {
			t.Errorf("bootstrap.json %s reads back as %+v, %v; want %+v", stored, again, err, b)
		}
		// Text replies are read whatever white space surrounds them, as containerd trims it.
		if out[0] >= 0x20 {
			padded := append([]byte("\n\t"), out...)
			if again, err := ParseStartReply(padded); err != nil || again != b {
				t.Errorf("ParseStartReply(%q) = %+v, %v; without the white space %+v", padded, again, err, b)
			}
		}
	})
}
