// SPDX-License-Identifier: Apache-2.0

// The delete action's runc side for a container whose shim is gone: containerd v2.4's runc
// shim does it in manager.Stop (cmd/containerd-shim-runc-v2/manager), with runc delete
// --force and the rootfs unmount.

package process

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	runc "github.com/containerd/go-runc"

	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

// ForceDelete is what the delete action does for a container whose shim died: runc delete
// --force, which kills what is left, then the rootfs unmount.
func ForceDelete(ctx context.Context, o bundle.Options, namespace, id, dir string) error {
	// Both steps are tried whatever the other did: the delete action reports what failed and
	// goes on, as containerd's runc shim does.
	var errs []error
	r := newRuntime(o, namespace, dir)
	mark := logEnd(r.Log)
	if err := r.Delete(ctx, id, &runc.DeleteOpts{Force: true}); err != nil {
		if msg := lastRuncError(r.Log, mark); missingIn(err.Error(), msg) != containerMissing {
			errs = append(errs, runcFailure("delete --force", msg, err))
		}
	}
	if err := unmountAll(filepath.Join(dir, bundle.RootfsDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
