// SPDX-License-Identifier: Apache-2.0

// A ttrpc request framed by hand, to feed a shim what no generated client would send: a payload
// that is no valid message, a service the shim does not serve. Not a mirror of any containerd
// function: it writes the wire format github.com/containerd/ttrpc reads.

package testkit

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/containerd/ttrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// RawCall sends one hand-framed ttrpc request whose payload is exactly payload (which need not
// be a valid message) to the unix socket at path, and returns the status of the reply. It is
// how a test feeds a shim input that no generated client would send.
func RawCall(t testing.TB, path, service, method string, payload []byte) (codes.Code, string) {
	t.Helper()
	req, err := proto.Marshal(&ttrpc.Request{Service: service, Method: method, Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	// A ttrpc frame: payload length, stream id (odd: client-initiated), type 1 (request), flags.
	header := make([]byte, 10)
	binary.BigEndian.PutUint32(header[0:4], uint32(len(req)))
	binary.BigEndian.PutUint32(header[4:8], 1)
	header[8] = 1
	if _, err := conn.Write(append(header, req...)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(conn, header); err != nil {
		t.Fatalf("read reply header: %v", err)
	}
	body := make([]byte, binary.BigEndian.Uint32(header[0:4]))
	if _, err := io.ReadFull(conn, body); err != nil {
		t.Fatalf("read reply: %v", err)
	}
	if header[8] != 2 {
		t.Fatalf("reply has message type %d, want 2 (response)", header[8])
	}
	var resp ttrpc.Response
	if err := proto.Unmarshal(body, &resp); err != nil {
		t.Fatalf("decode reply: %v", err)
	}
	return codes.Code(resp.GetStatus().GetCode()), resp.GetStatus().GetMessage()
}
