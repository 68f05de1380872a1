// SPDX-License-Identifier: Apache-2.0

// The Task service under both API names, registered by hand. It mirrors service.RegisterTTRPC
// in containerd v2.4 cmd/containerd-shim-runc-v2/task/service.go, which registers v3 alone; v2
// is what containerd 1.x calls, and what core/runtime/v2/bridge.go NewTaskClient picks for a
// shim whose bootstrap reply says version 2.

package server

import (
	"context"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/ttrpc"
	"google.golang.org/protobuf/proto"
)

// Service names of the Task API generations. Their messages are the same on the wire, so one
// implementation on the v2 types serves both.
const (
	taskV2 = "containerd.task.v2.Task"
	taskV3 = "containerd.task.v3.Task"
)

// method adapts a typed handler to ttrpc's untyped one.
func method[Req any, PReq interface {
	*Req
	proto.Message
}, Resp proto.Message](fn func(context.Context, PReq) (Resp, error)) ttrpc.Method {
	return func(ctx context.Context, unmarshal func(any) error) (any, error) {
		req := PReq(new(Req))
		if err := unmarshal(req); err != nil {
			return nil, err
		}
		return fn(ctx, req)
	}
}

// registerTask serves svc under both Task API names.
func registerTask(srv *ttrpc.Server, svc taskapi.TTRPCTaskService) {
	desc := &ttrpc.ServiceDesc{Methods: map[string]ttrpc.Method{
		"State":      method(svc.State),
		"Create":     method(svc.Create),
		"Start":      method(svc.Start),
		"Delete":     method(svc.Delete),
		"Pids":       method(svc.Pids),
		"Pause":      method(svc.Pause),
		"Resume":     method(svc.Resume),
		"Checkpoint": method(svc.Checkpoint),
		"Kill":       method(svc.Kill),
		"Exec":       method(svc.Exec),
		"ResizePty":  method(svc.ResizePty),
		"CloseIO":    method(svc.CloseIO),
		"Update":     method(svc.Update),
		"Wait":       method(svc.Wait),
		"Stats":      method(svc.Stats),
		"Connect":    method(svc.Connect),
		"Shutdown":   method(svc.Shutdown),
	}}
	srv.RegisterService(taskV2, desc)
	srv.RegisterService(taskV3, desc)
}
