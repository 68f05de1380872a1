// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"reflect"
	"testing"
	"time"

	introspection "github.com/containerd/containerd/api/services/introspection/v1"
	apitypes "github.com/containerd/containerd/api/types"
	"github.com/opencontainers/runtime-spec/specs-go/features"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"
)

// testRuntimeInfo asks containerd 2.x for the runtime's info as CRI does for a runtime handler
// (introspection's PluginInfo of the task manager, which runs `shim -info`): the features
// containerd decodes from it must be runc's own. Without them containerd refuses containers
// with idmapped mounts, and CRI offers no recursive read-only mounts on the handler.
func (e *env) testRuntimeInfo(t *testing.T) {
	want, err := exec.Command(binaryName(e.runc), "features").Output()
	if err != nil {
		t.Fatalf("%s features: %v", binaryName(e.runc), err)
	}
	var wantF features.Features
	if err := json.Unmarshal(want, &wantF); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("unix://"+e.c.Address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	opts, err := anypb.New(&apitypes.RuntimeRequest{RuntimePath: e.shim})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := introspection.NewIntrospectionClient(conn).PluginInfo(ctx, &introspection.PluginInfoRequest{
		Type: "io.containerd.runtime.v2", ID: "task", Options: opts})
	if err != nil {
		t.Fatalf("PluginInfo: %v", err)
	}
	var info apitypes.RuntimeInfo
	if err := resp.GetExtra().UnmarshalTo(&info); err != nil {
		t.Fatalf("PluginInfo extra %q: %v", resp.GetExtra().GetTypeUrl(), err)
	}
	if info.GetName() != "io.containerd.shimwalk.v2" {
		t.Errorf("runtime name %q", info.GetName())
	}
	var gotF features.Features
	if err := json.Unmarshal(info.GetFeatures().GetValue(), &gotF); err != nil {
		t.Fatalf("features %q: %v", info.GetFeatures().GetTypeUrl(), err)
	}
	if !reflect.DeepEqual(gotF, wantF) {
		t.Errorf("features %+v, want %+v", gotF, wantF)
	}
}
