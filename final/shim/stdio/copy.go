// SPDX-License-Identifier: Apache-2.0

// Copying between a process's pipes and containerd's FIFOs. Mirrors the copy loops of
// containerd v2.4 cmd/containerd-shim-runc-v2/process/io.go (copyPipes), which hold a pooled
// 32 KiB buffer per stream for the process's whole life; here a buffer is taken from the pool
// only when the source has data, so a quiet process, the usual one, holds none.

package stdio

import (
	"errors"
	"io"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// copyBufSize is what one read moves at most: the size containerd's shim copies with.
const copyBufSize = 32 << 10

var copyBufs = sync.Pool{New: func() any {
	b := make([]byte, copyBufSize)
	return &b
}}

// copyWhenReady copies src to dst until src ends or fails. A src with a raw descriptor
// (syscall.Conn: any *os.File, pipes and FIFOs here) is waited on without a buffer, and one is
// taken from the pool only for each read; a src without one is copied with io.Copy.
func copyWhenReady(dst io.Writer, src io.Reader) error {
	sc, ok := src.(syscall.Conn)
	if !ok {
		_, err := io.Copy(dst, src)
		return err
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		_, err := io.Copy(dst, src)
		return err
	}
	for {
		var (
			buf  *[]byte
			n    int
			rerr error
		)
		err := raw.Read(func(fd uintptr) bool {
			b := copyBufs.Get().(*[]byte)
			for {
				n, rerr = unix.Read(int(fd), *b)
				if !errors.Is(rerr, unix.EINTR) {
					break
				}
			}
			if errors.Is(rerr, unix.EAGAIN) {
				// Back to the pool while the runtime waits for data: returning false waits.
				copyBufs.Put(b)
				return false
			}
			buf = b
			return true
		})
		if buf == nil {
			return err // src was closed while waiting
		}
		if err == nil {
			err = rerr
		}
		if err != nil || n <= 0 {
			copyBufs.Put(buf)
			return err // n == 0 is the end of src
		}
		_, err = dst.Write((*buf)[:n])
		copyBufs.Put(buf)
		if err != nil {
			return err
		}
	}
}
