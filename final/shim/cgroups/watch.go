// SPDX-License-Identifier: Apache-2.0

// The OOM watch: one goroutine and one epoll set for every container of the shim, an eventfd
// per v1 memory cgroup and one inotify descriptor for the v2 memory.events files, and a retry
// when a v1 signal comes before the kill is counted. Mirrors containerd v2.4 pkg/oom (v1/v1.go
// epoller, v2/v2.go watcher), with the differences the package doc names.

package cgroups

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Notify is called, from the watcher's goroutine, when the kernel may have OOM-killed in the
// cgroup of id. It reports whether it found a kill it had not seen, or has nothing more to
// learn (id is gone); false asks, for a v1 cgroup, to be called again shortly (v2 counts the
// kill before it changes memory.events, so one call is enough).
type Notify func(id string) bool

// retries are the delays between further calls of Notify after a v1 notification found no
// new kill: the kernel signals memory.oom_control when the cgroup runs out of memory, before
// its OOM killer has picked a victim and counted the kill.
var retries = []time.Duration{
	10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
	250 * time.Millisecond, 500 * time.Millisecond, time.Second,
}

// ErrStopped is returned by Add once the watcher's Run has ended.
var ErrStopped = errors.New("oom watcher stopped")

// Watcher watches the memory cgroups of every container of a shim for OOM kills with one
// goroutine (Run) and one epoll set: per v1 cgroup an eventfd the kernel signals, for all v2
// cgroups one inotify descriptor watching their memory.events files.
type Watcher struct {
	notify Notify
	log    *slog.Logger

	epfd    int // the epoll set; fixed from New, closed when Run ends
	inotify int // nonblocking, in the set
	wake    int // an eventfd in the set, signalled to end Run

	mu      sync.Mutex
	stopped bool               // guarded by mu; the descriptors above are closed
	watches map[string]watch   // guarded by mu; id -> what watches its cgroup
	byFD    map[int32]string   // guarded by mu; v1 eventfd -> id
	byWD    map[int32]string   // guarded by mu; v2 inotify watch -> id
	pending map[string]pending // guarded by mu; ids to notify again (v1 only)
}

type watch struct {
	fd int32 // v1 eventfd, or -1
	wd int32 // v2 inotify watch, or -1
}

type pending struct {
	next    time.Time
	attempt int
}

// NewWatcher returns a watcher that calls notify; Run must run for it to do so.
func NewWatcher(notify Notify, log *slog.Logger) (*Watcher, error) {
	w := &Watcher{
		notify: notify, log: log, epfd: -1, inotify: -1, wake: -1,
		watches: map[string]watch{}, byFD: map[int32]string{}, byWD: map[int32]string{},
		pending: map[string]pending{},
	}
	var err error
	if w.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, fmt.Errorf("oom watcher: epoll: %w", err)
	}
	if w.inotify, err = unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK); err != nil {
		w.closeFDs()
		return nil, fmt.Errorf("oom watcher: inotify: %w", err)
	}
	if w.wake, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		w.closeFDs()
		return nil, fmt.Errorf("oom watcher: eventfd: %w", err)
	}
	for _, fd := range []int{w.inotify, w.wake} {
		if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			w.closeFDs()
			return nil, fmt.Errorf("oom watcher: epoll add: %w", err)
		}
	}
	return w, nil
}

func (w *Watcher) closeFDs() {
	for _, fd := range []int{w.epfd, w.inotify, w.wake} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// Add watches m, the memory cgroup of id. Adding an id again replaces its watch.
func (w *Watcher) Add(id string, m Memory) error {
	w.Remove(id)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return ErrStopped
	}
	if m.Unified {
		wd, err := unix.InotifyAddWatch(w.inotify, m.eventsFile(), unix.IN_MODIFY)
		if err != nil {
			return fmt.Errorf("watch %s: %w", m.eventsFile(), err)
		}
		w.watches[id] = watch{fd: -1, wd: int32(wd)}
		w.byWD[int32(wd)] = id
		return nil
	}
	fd, err := registerV1(m.Dir)
	if err != nil {
		return err
	}
	if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
		unix.Close(fd)
		return fmt.Errorf("oom watcher: epoll add: %w", err)
	}
	w.watches[id] = watch{fd: int32(fd), wd: -1}
	w.byFD[int32(fd)] = id
	return nil
}

// registerV1 asks the kernel to signal a new eventfd when the v1 memory cgroup dir runs out of
// memory. The registration lasts until the eventfd is closed or the cgroup removed.
func registerV1(dir string) (int, error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return -1, fmt.Errorf("oom eventfd: %w", err)
	}
	control, err := os.Open(filepath.Join(dir, "memory.oom_control"))
	if err != nil {
		unix.Close(efd)
		return -1, fmt.Errorf("open memory.oom_control: %w", err)
	}
	defer control.Close()
	line := fmt.Sprintf("%d %d", efd, control.Fd())
	if err := os.WriteFile(filepath.Join(dir, "cgroup.event_control"), []byte(line), 0o600); err != nil {
		unix.Close(efd)
		return -1, fmt.Errorf("register oom eventfd in %s: %w", dir, err)
	}
	return efd, nil
}

// Remove stops watching the cgroup of id; an id not watched is no error.
func (w *Watcher) Remove(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.pending, id)
	x, ok := w.watches[id]
	if !ok {
		return
	}
	delete(w.watches, id)
	if w.stopped {
		return
	}
	if x.fd >= 0 {
		_ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, int(x.fd), nil)
		unix.Close(int(x.fd))
		delete(w.byFD, x.fd)
	}
	if x.wd >= 0 && w.byWD[x.wd] == id {
		// Fails when the kernel dropped the watch with its cgroup already: nothing to undo.
		_, _ = unix.InotifyRmWatch(w.inotify, uint32(x.wd))
		delete(w.byWD, x.wd)
	}
}

// watching is the number of cgroups watched.
func (w *Watcher) watching() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.watches)
}

// Run calls Notify for the cgroups that the kernel signals until ctx ends, then closes every
// descriptor the watcher holds. It runs once per watcher: its owner starts it right after
// NewWatcher and stops it with ctx.
func (w *Watcher) Run(ctx context.Context) {
	stopWake := context.AfterFunc(ctx, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.stopped {
			one := [8]byte{1}
			_, _ = unix.Write(w.wake, one[:])
		}
	})
	defer func() {
		stopWake()
		w.mu.Lock()
		defer w.mu.Unlock()
		w.stopped = true
		for _, x := range w.watches {
			if x.fd >= 0 {
				unix.Close(int(x.fd))
			}
		}
		w.closeFDs()
	}()
	var events [32]unix.EpollEvent
	for {
		n, err := unix.EpollWait(w.epfd, events[:], w.timeout())
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			w.log.Error("oom watcher: epoll wait", "err", err)
			return
		}
		var ids []string
		for _, ev := range events[:n] {
			switch int(ev.Fd) {
			case w.wake:
				return
			case w.inotify:
				ids = append(ids, w.readInotify()...)
			default:
				w.mu.Lock()
				id, ok := w.byFD[ev.Fd]
				if ok {
					// Only under mu and while registered: Remove may have closed this number,
					// and something else may have opened it since.
					drain(int(ev.Fd))
				}
				w.mu.Unlock()
				if ok {
					ids = append(ids, id)
					w.retry(id, -1)
				}
			}
		}
		for _, id := range ids {
			if w.notify(id) {
				w.settle(id)
			}
		}
		w.retryDue()
	}
}

// timeout is how long epoll may sleep: until the next retry is due, or forever.
func (w *Watcher) timeout() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pending) == 0 {
		return -1
	}
	var first time.Time
	for _, p := range w.pending {
		if first.IsZero() || p.next.Before(first) {
			first = p.next
		}
	}
	ms := time.Until(first).Milliseconds()
	if ms < 0 {
		return 0
	}
	return int(ms) + 1
}

// retry schedules the next call of Notify for a v1 id, after attempt (-1: a fresh signal).
func (w *Watcher) retry(id string, attempt int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.watches[id]; !ok || attempt+1 >= len(retries) {
		delete(w.pending, id)
		return
	}
	w.pending[id] = pending{next: time.Now().Add(retries[attempt+1]), attempt: attempt + 1}
}

func (w *Watcher) settle(id string) {
	w.mu.Lock()
	delete(w.pending, id)
	w.mu.Unlock()
}

// retryDue calls Notify again for the ids whose retry is due.
func (w *Watcher) retryDue() {
	now := time.Now()
	w.mu.Lock()
	var due []string
	attempts := map[string]int{}
	for id, p := range w.pending {
		if !p.next.After(now) {
			due = append(due, id)
			attempts[id] = p.attempt
		}
	}
	w.mu.Unlock()
	for _, id := range due {
		if w.notify(id) {
			w.settle(id)
		} else {
			w.retry(id, attempts[id])
		}
	}
}

// readInotify drains the inotify descriptor and returns the ids whose memory.events changed.
func (w *Watcher) readInotify() []string {
	var ids []string
	buf := make([]byte, 4096)
	for {
		n, err := unix.Read(w.inotify, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n <= 0 {
			return ids
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				// Events were lost, and which cgroups they were for with them: look at all.
				w.mu.Lock()
				for _, id := range w.byWD {
					ids = append(ids, id)
				}
				w.mu.Unlock()
				continue
			}
			w.mu.Lock()
			id, ok := w.byWD[ev.Wd]
			if ok && ev.Mask&unix.IN_IGNORED != 0 {
				// The kernel dropped the watch: the file, and so the cgroup, is gone.
				delete(w.byWD, ev.Wd)
			}
			w.mu.Unlock()
			if ok && ev.Mask&unix.IN_MODIFY != 0 {
				ids = append(ids, id)
			}
		}
	}
}

// drain resets an eventfd's count, so that epoll reports it again only on a new signal.
func drain(fd int) {
	var buf [8]byte
	_, _ = unix.Read(fd, buf[:])
}
