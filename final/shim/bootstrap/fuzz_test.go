// SPDX-License-Identifier: Apache-2.0

package bootstrap

import (
	"path/filepath"
	"strings"
	"testing"

	bootapi "github.com/containerd/containerd/api/runtime/bootstrap/v1"
	"github.com/containerd/containerd/api/types/runc/options"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// FuzzReadRequest feeds start's stdin parser what containerd of either generation might send,
// and what it never would. It must answer with a request or an error, never a panic, and a
// request it returns must name an absolute socket directory and be of the generation the
// input was.
func FuzzReadRequest(f *testing.F) {
	f.Setenv("SHIMWALK_SOCKET_DIR", "")
	fl := flags{namespace: "ns", id: "task"}
	add := func(m proto.Message) {
		data, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	anyOf := func(m proto.Message) *anypb.Any {
		a, err := anypb.New(m)
		if err != nil {
			f.Fatal(err)
		}
		return a
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff})
	add(anyOf(&options.Options{BinaryName: "runc", Root: "/run/x", ShimCgroup: "/shim"}))
	add(anyOf(&runtimeoptions.Options{ConfigBody: []byte("BinaryName = \"crun\"\n")}))
	add(anyOf(&runtimeoptions.Options{ConfigBody: []byte("NoSuchKey = 1\n")}))
	add(anyOf(&runtimeoptions.Options{ConfigPath: "relative.toml"}))
	add(&anypb.Any{TypeUrl: "containerd.runc.v1.Options", Value: []byte{0xff}})
	add(&anypb.Any{TypeUrl: "example.com/no.such.Type"})
	add(&bootapi.BootstrapParams{InstanceID: "task", Namespace: "ns"})
	add(&bootapi.BootstrapParams{InstanceID: "task", Namespace: "ns", SocketDir: proto.String("/run/sd")})
	add(&bootapi.BootstrapParams{InstanceID: "task", Namespace: "ns", SocketDir: proto.String("relative")})
	add(&bootapi.BootstrapParams{InstanceID: "other", Namespace: "ns"})
	add(&bootapi.BootstrapParams{InstanceID: "task", Namespace: "ns", Extensions: []*bootapi.Extension{
		{Value: anyOf(&options.Options{BinaryName: "runc"})},
		{Value: &anypb.Any{TypeUrl: "example.com/cri.Config", Value: []byte{1, 2, 3}}},
		{Value: &anypb.Any{TypeUrl: "type.googleapis.com/containerd.runc.v1.Options", Value: []byte{0xff}}},
		{},
	}})
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := readRequest(fl, in)
		if err != nil {
			// Main prints it as the one line containerd puts into its own error.
			if msg := errorLine(err); msg == "" || strings.ContainsAny(msg, "\r\n") {
				t.Errorf("readRequest(%q): error %q is not one line", in, msg)
			}
			return
		}
		if !filepath.IsAbs(r.socketDir) {
			t.Errorf("readRequest(%q): socket directory %q is not absolute", in, r.socketDir)
		}
		var params bootapi.BootstrapParams
		isParams := len(in) > 0 && proto.Unmarshal(in, &params) == nil &&
			params.GetInstanceID() == fl.id && params.GetNamespace() == fl.namespace
		if r.bootstrap != isParams {
			t.Errorf("readRequest(%q): bootstrap = %v, want %v", in, r.bootstrap, isParams)
		}
		if isParams && params.GetSocketDir() != "" && r.socketDir != params.GetSocketDir() {
			t.Errorf("readRequest(%q): socket directory %q, want the one given, %q", in, r.socketDir, params.GetSocketDir())
		}
	})
}
