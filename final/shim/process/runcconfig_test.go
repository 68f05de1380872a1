// SPDX-License-Identifier: Apache-2.0

package process

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"github.com/containerd/errdefs"
	"github.com/pelletier/go-toml/v2"
	"golang.org/x/sys/unix"
)

// realistic is a config as a CRI runtime handler's options file would hold it.
const realistic = `# runc options for the shimwalk runtime handler
BinaryName = "/usr/local/bin/runc"
Root = "/run/containerd/runc"   # state directory
SystemdCgroup = true
NoPivotRoot = false
NoNewKeyring = false
IoUid = 1000
IoGid = 1001
CriuImagePath = '/var/lib/criu/images'
CriuWorkPath = '/var/lib/criu/work'
ShimCgroup = "/shimwalk.slice"
`

// goodDocs are accepted by both decoders, with the same result.
var goodDocs = []string{
	realistic,
	strings.ReplaceAll(realistic, "\n", "\r\n"),
	"",
	"\n\n",
	"# only a comment",
	"# only a comment\n",
	"  \t\n# indented blank line above\n",
	`BinaryName = "runc"`,
	"BinaryName = 'crun'\n",
	"\tBinaryName\t=\t'crun'\t\n",
	"BinaryName='crun'#comment right after\n",
	"binaryname = 'crun'\nsystemdcgroup = true\n",
	"BINARYNAME = 'crun'\nIOUID = 7\n",
	`"BinaryName" = "runc"`,
	`'Root' = '/run/runc'`,
	`"Binary\u004eame" = "runc"`,
	"\"NoNew\u212Aeyring\" = true\n", // KELVIN SIGN lowers to k, as go-toml folds it
	`Root = ""`,
	`Root = ''`,
	`Root = "C:\\runc\t\"quoted\"\b\f\n\r"`,
	`Root = 'C:\runc\t"quoted"'`,
	`Root = "\u00e9\U0001F600"`,
	`Root = "é😀 unicode"`,
	`Root = "\u0000"`,
	`Root = "#not a comment"   # a comment`,
	`Root = "a` + "\t" + `b"`,
	"IoUid = 0\nIoGid = 4294967295\n",
	"IoUid = +5\nIoGid = -0\n",
	"IoUid = +0",
	"IoUid = 1_000_000",
	"IoUid = 0xffff_FFFF\nIoGid = 0o777\n",
	"IoUid = 0b1010\nIoGid = 0x00000001\n",
	"IoUid = 42 # uid\n",
	"SystemdCgroup = false\nNoPivotRoot = true\nNoNewKeyring = true\n",
	"SystemdCgroup = true#x",
}

// badDocs are refused by both decoders.
var badDocs = []string{
	"NoSuchKey = true\n",
	"binary_name = 'runc'",
	`"" = "runc"`,
	`'' = 1`,
	"\"\u017FystemdCgroup\" = true", // go-toml lowers keys; it does not fold ſ to s
	"SystemdCgroup = 'true'",
	"SystemdCgroup = 1",
	"SystemdCgroup = True",
	"SystemdCgroup = trueish",
	"Root = 1",
	"Root = true",
	"IoUid = '1000'",
	"IoUid = true",
	"IoUid = -1",
	"IoUid = 4294967296",
	"IoGid = 0x100000000",
	"IoUid = 99999999999999999999",
	"IoUid = 01",
	"IoUid = 00",
	"IoUid = 0_1",
	"IoUid = 1__0",
	"IoUid = 1_",
	"IoUid = _1",
	"IoUid = 0x",
	"IoUid = 0X10",
	"IoUid = -0x10",
	"IoUid = +0o7",
	"IoUid = 0b2",
	"IoUid = 0o8",
	"IoUid = +",
	"IoUid = 1.0",
	"IoUid = 1e3",
	"IoUid = inf",
	"IoUid = nan",
	"Root = 1979-05-27",
	"Root = 07:32:00",
	"BinaryName = 'a'\nBinaryName = 'b'\n",
	"BinaryName = 'a'\n\"BinaryName\" = 'b'\n",
	`Root = "\q"`,
	`Root = "\x4"`,
	`Root = "\u12"`,
	`Root = "\uD800"`,
	`Root = "\U00110000"`,
	`Root = "\uZZZZ"`,
	`Root = "unterminated`,
	`Root = 'unterminated`,
	"Root = \"line\nbreak\"",
	"Root = 'line\nbreak'",
	"Root = \"nul\x00\"",
	"Root = 'del\x7f'",
	"# bell\x07\n",
	"Root = 'a' # bell\x07",
	"Root = 'a'\r",
	"Root = 'a'\rIoUid = 1\n",
	"Root = 'a' 'b'",
	"Root = 'a',",
	"Root",
	"Root =",
	"Root = # nothing",
	"= 'a'",
	"Root 'a'",
	"Ro ot = 'a'",
	"[Root]\n",
	"[runc]\nBinaryName = 'runc'\n",
	"[[runc]]\n",
	"[]",
	"Root.x = 'a'",
	"options.BinaryName = 'runc'",
	`Root = ["a"]`,
	`Root = {x = "a"}`,
	"\ufeffRoot = 'a'",
	"Root = '\xff'",
	"Root = \"\xc3\"",
}

// outsideSubset are documents go-toml accepts but decodeRuncConfig refuses, and why.
var outsideSubset = []struct{ doc, why string }{
	{`Root = """/run/runc"""`, "multi-line basic string"},
	{"Root = '''/run/runc'''", "multi-line literal string"},
	{"Root = \"\"\"\n/run/runc\"\"\"", "multi-line basic string over two lines"},
	{`Root = "\e"`, `\e is a TOML 1.1 escape, not TOML 1.0`},
	{`Root = "\x41"`, `\xHH is a TOML 1.1 escape, not TOML 1.0`},
	{"BinaryName = 'a'\nbinaryname = 'b'\n", "two keys that differ in case set one field; go-toml keeps the last"},
}

// decodeWithTOML decodes as fromConfig did before it had its own decoder.
func decodeWithTOML(data []byte) (runcConfig, error) {
	var c runcConfig
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(&c)
	return c, err
}

// checkAgainstTOML fails t if decodeRuncConfig accepts data that go-toml refuses, or decodes
// it differently.
func checkAgainstTOML(t *testing.T, data []byte) (oursErr, tomlErr error) {
	t.Helper()
	ours, oursErr := decodeRuncConfig(data)
	theirs, tomlErr := decodeWithTOML(data)
	if oursErr == nil && tomlErr != nil {
		t.Errorf("%q: accepted as %+v, go-toml refuses: %v", data, ours, tomlErr)
	}
	if oursErr == nil && tomlErr == nil && ours != theirs {
		t.Errorf("%q: decoded as %+v, go-toml as %+v", data, ours, theirs)
	}
	return oursErr, tomlErr
}

func TestRuncConfigAgainstTOML(t *testing.T) {
	for _, doc := range goodDocs {
		if oursErr, tomlErr := checkAgainstTOML(t, []byte(doc)); oursErr != nil || tomlErr != nil {
			t.Errorf("%q: want both to accept; ours: %v; go-toml: %v", doc, oursErr, tomlErr)
		}
	}
	for _, doc := range badDocs {
		if oursErr, tomlErr := checkAgainstTOML(t, []byte(doc)); oursErr == nil || tomlErr == nil {
			t.Errorf("%q: want both to refuse; ours: %v; go-toml: %v", doc, oursErr, tomlErr)
		}
	}
	for _, o := range outsideSubset {
		if oursErr, tomlErr := checkAgainstTOML(t, []byte(o.doc)); oursErr == nil || tomlErr != nil {
			t.Errorf("%q (%s): want only go-toml to accept; ours: %v; go-toml: %v", o.doc, o.why, oursErr, tomlErr)
		}
	}
}

func TestRuncConfigValues(t *testing.T) {
	want := runcConfig{
		BinaryName: "/usr/local/bin/runc", Root: "/run/containerd/runc", SystemdCgroup: true,
		IoUid: 1000, IoGid: 1001, CriuImagePath: "/var/lib/criu/images",
		CriuWorkPath: "/var/lib/criu/work", ShimCgroup: "/shimwalk.slice",
	}
	for _, doc := range []string{realistic, strings.ReplaceAll(realistic, "\n", "\r\n")} {
		got, err := decodeRuncConfig([]byte(doc))
		if err != nil || got != want {
			t.Errorf("%q: got %+v, %v; want %+v", doc, got, err, want)
		}
	}
	tests := map[string]runcConfig{
		`Root = "a\tb\\c\"d\u00e9\U0001F600"`: {Root: "a\tb\\c\"dé😀"},
		`Root = 'a\tb'`:                       {Root: `a\tb`},
		"IoUid = 0xff\nIoGid = 0b11":          {IoUid: 255, IoGid: 3},
		"ioUID = 1_000 # comment":             {IoUid: 1000},
	}
	for doc, want := range tests {
		if got, err := decodeRuncConfig([]byte(doc)); err != nil || got != want {
			t.Errorf("%q: got %+v, %v; want %+v", doc, got, err, want)
		}
	}
}

func TestRuncConfigErrorsNameTheLine(t *testing.T) {
	tests := map[string]string{
		"Root = 'a'\n\nIoUid = -1\n":                "line 3: IoUid: -1 is out of range",
		"# c\r\nNoSuchKey = 1\r\n":                  `line 2: unknown key "NoSuchKey"`,
		"Root = 'a'\nroot = 'b'\n":                  "line 2: Root is already set on line 1",
		"SystemdCgroup = 'yes'":                     "line 1: SystemdCgroup: want a boolean, not string",
		"\n[runc]\n":                                "line 2: tables are not supported",
		"Root = 'a'\nBinaryName = \"\\q\"":          `line 2: BinaryName: invalid escape \q`,
		"IoGid = 1.5":                               "line 1: IoGid: 1.5 is not an integer",
		"runc.Root = 'a'":                           "line 1: dotted keys are not supported",
		"Root = '''a'''":                            "line 1: Root: multi-line strings are not supported",
		"Root = \"a":                                "line 1: Root: unterminated string",
		"IoUid = 0x1_0000_0000":                     "line 1: IoUid: 0x1_0000_0000 is out of range",
		"ShimCgroup = [\"/a\"]":                     "line 1: ShimCgroup: arrays are not supported",
		"ShimCgroup = 'a'\nShimCgroup = 'a' junk\n": "line 2: ShimCgroup: unexpected",
	}
	for doc, want := range tests {
		_, err := decodeRuncConfig([]byte(doc))
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q: got error %v, want one starting %q", doc, err, want)
		}
	}
}

func TestFromConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runtime.toml")
	if err := os.WriteFile(path, []byte(realistic), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*runtimeoptions.Options{{ConfigBody: []byte(realistic)}, {ConfigPath: path}} {
		o, err := fromConfig(r)
		if err != nil {
			t.Fatalf("%v: %v", r, err)
		}
		if o.BinaryName != "/usr/local/bin/runc" || !o.SystemdCgroup || o.IoGid != 1001 || o.ShimCgroup != "/shimwalk.slice" {
			t.Errorf("%v: got %v", r, o)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.toml")
	if err := os.WriteFile(bad, []byte("IoUid = 1\nIoUid = 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*runtimeoptions.Options{{ConfigBody: []byte("NoSuchKey = true\n")}, {ConfigPath: bad}} {
		_, err := fromConfig(r)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "runtime config") || !strings.Contains(err.Error(), "line ") {
			t.Errorf("%v: got %v, want an InvalidArgument runtime config error naming the line", r, err)
		}
	}
}

// TestConfigPathNotQuoted: the shim reads ConfigPath as root, so a caller could name a file it
// cannot read itself; an error about that file says which line is wrong, never what it holds.
func TestConfigPathNotQuoted(t *testing.T) {
	dir := t.TempDir()
	for name, doc := range map[string]string{
		"a bare word":    "password = hunter2\n",
		"an unknown key": "Root = '/run/x'\nhunter2 = 'x'\n",
		"a wrong type":   "IoUid = 'hunter2'\n",
		"a bad escape":   "BinaryName = \"hunter2\\q\"\n",
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := fromConfig(&runtimeoptions.Options{ConfigPath: path})
		if !errors.Is(err, errdefs.ErrInvalidArgument) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: got %v, want InvalidArgument that quotes nothing of the file", name, err)
		}
	}
}

// TestConfigPathRefusesSpecialFiles: ConfigPath must be a regular file. A FIFO (whose open
// blocks until someone writes), a directory or a device is refused at once, including a FIFO
// swapped in for a regular file while the shim reads it: the check and the read are of one inode.
func TestConfigPathRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, dir, "/dev/null"} {
		if _, err := fromConfig(&runtimeoptions.Options{ConfigPath: path}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want InvalidArgument", path, err)
		}
	}

	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, []byte("Root = '/run/x'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "config")
	if err := os.Link(regular, config); err != nil {
		t.Fatal(err)
	}
	// The swapper also watches for a reader of the FIFO: an open for writing without blocking
	// succeeds only when someone has it open for reading, and only a read of ConfigPath could.
	// Its writer lets such a read go on (to the end of the file), so the test fails instead of
	// hanging.
	var fifoRead atomic.Bool
	stop := make(chan struct{})
	swapped := make(chan error, 1)
	go func() {
		swapped <- func() error {
			tmp := filepath.Join(dir, "tmp")
			for {
				select {
				case <-stop:
					return nil
				default:
				}
				for _, from := range []string{fifo, regular} {
					if err := os.Link(from, tmp); err != nil {
						return err
					}
					if err := os.Rename(tmp, config); err != nil {
						return err
					}
				}
				if w, err := os.OpenFile(fifo, os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
					fifoRead.Store(true)
					w.Close()
				}
			}
		}()
	}()
	defer func() {
		close(stop)
		if err := <-swapped; err != nil {
			t.Error(err)
		}
	}()
	var read int
	for range 5000 {
		_, err := fromConfig(&runtimeoptions.Options{ConfigPath: config})
		if fifoRead.Load() {
			t.Fatal("the read of ConfigPath opened a FIFO swapped in after the check, and blocked in it")
		}
		if err == nil {
			read++
		} else if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("got %v, want the config or InvalidArgument", err)
		}
	}
	if read == 0 {
		t.Error("the regular file was never read: the test raced nothing")
	}
}

// FuzzRuncConfig checks that whatever decodeRuncConfig accepts, go-toml accepts and decodes
// the same way.
func FuzzRuncConfig(f *testing.F) {
	for _, doc := range goodDocs {
		f.Add([]byte(doc))
	}
	for _, doc := range badDocs {
		f.Add([]byte(doc))
	}
	for _, o := range outsideSubset {
		f.Add([]byte(o.doc))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkAgainstTOML(t, data)
	})
}
