// SPDX-License-Identifier: Apache-2.0

// The shim's start reply in each form containerd accepts (protobuf, JSON, bare address), and
// reading it back from the bundle: bootstrap.json, or the address file of older shims. Mirrors
// containerd v2.4 core/runtime/v2/shim.go (parseStartResponse, readBootstrapParams).

package driver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"

	bootstrapapi "github.com/containerd/containerd/api/runtime/bootstrap/v1"
	"google.golang.org/protobuf/proto"

	"github.com/shimwalk/shimwalk/final/internal/bundle"
	"github.com/shimwalk/shimwalk/final/internal/fsutil"
)

// Bootstrap is a shim's start reply, as bundle.Bootstrap stores it.
type Bootstrap = bundle.Bootstrap

// ParseStartReply reads a shim's start output in any of the three forms containerd accepts:
// a BootstrapResult protobuf (containerd 2.3 and later), JSON (1.7 and later) or a bare
// address (every version).
func ParseStartReply(out []byte) (Bootstrap, error) {
	trimmed := bytes.TrimSpace(out)
	var b Bootstrap
	switch {
	case len(trimmed) == 0:
		return b, errors.New("shim printed no address")
	case trimmed[0] == '{':
		if err := json.Unmarshal(trimmed, &b); err != nil {
			return b, fmt.Errorf("start reply is not valid JSON: %w", err)
		}
	case out[0] < 0x20 && !unicode.IsSpace(rune(out[0])):
		// Printable text never starts with a control byte; a protobuf's first tag does. White
		// space is text's: no BootstrapResult begins with a tag in that range, and a bare
		// address may be printed after a line break.
		var r bootstrapapi.BootstrapResult
		if err := proto.Unmarshal(out, &r); err != nil {
			return b, fmt.Errorf("start reply is not a BootstrapResult: %w", err)
		}
		b = Bootstrap{Version: int(r.GetVersion()), Address: r.GetAddress(), Protocol: r.GetProtocol()}
	default:
		b = Bootstrap{Version: 2, Address: string(trimmed), Protocol: "ttrpc"}
	}
	if b.Protocol == "" {
		b.Protocol = "ttrpc"
	}
	if err := checkAddress(b.Address); err != nil {
		return Bootstrap{}, err
	}
	if b.Protocol != "ttrpc" {
		return Bootstrap{}, fmt.Errorf("shim speaks %q; only ttrpc is supported", b.Protocol)
	}
	return b, nil
}

func checkAddress(a string) error {
	path, ok := strings.CutPrefix(a, "unix://")
	if !ok || path == "" || strings.ContainsAny(path, "\x00\n") {
		return fmt.Errorf("start reply has no unix:// address: %q", a)
	}
	// bootstrap.json is JSON: a path that is not UTF-8 would be stored as another one.
	if !utf8.ValidString(path) {
		return fmt.Errorf("start reply's address is not UTF-8: %q", a)
	}
	return nil
}

// ReadBootstrap loads dir/bootstrap.json, or, for shims started by an older caller, the bare
// address file that containerd 1.6 shims write.
func ReadBootstrap(dir string) (Bootstrap, error) {
	data, err := os.ReadFile(filepath.Join(dir, bundle.BootstrapFile))
	if errors.Is(err, os.ErrNotExist) {
		data, err = os.ReadFile(filepath.Join(dir, bundle.AddressFile))
	}
	if err != nil {
		return Bootstrap{}, fmt.Errorf("read shim address: %w", err)
	}
	return ParseStartReply(data)
}

func writeFileAtomic(path string, data []byte) error {
	return fsutil.WriteFileAtomic(path, data, 0o600)
}
