// SPDX-License-Identifier: Apache-2.0

// This file decodes the TOML config that runtimeoptions.v1.Options carry into runcConfig: the
// flat key = value form of the runc options that containerd's runc shim (containerd v2.4) decodes
// with go-toml. It is our own because a general TOML library added about 0.27 MB to a binary
// whose size is the shim's resident memory, for a document of a few lines.

package process

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// decodeRuncConfig decodes a subset of TOML into a runcConfig: top-level key = value lines whose
// keys are bare or quoted and whose values are single-line strings, booleans or integers, with
// comments and blank lines. Keys match field names as go-toml matches them (the key or its lower
// case equals the field name's lower case). Anything else, including tables, dotted keys, arrays,
// floats, dates and multi-line strings, is refused: none of them can fill this flat struct.
func decodeRuncConfig(data []byte) (runcConfig, error) {
	var c runcConfig
	if !utf8.Valid(data) {
		return c, errors.New("not UTF-8 text")
	}
	fields := []struct {
		name string
		dst  any
	}{
		{"BinaryName", &c.BinaryName}, {"Root", &c.Root}, {"SystemdCgroup", &c.SystemdCgroup},
		{"NoPivotRoot", &c.NoPivotRoot}, {"NoNewKeyring", &c.NoNewKeyring}, {"IoUid", &c.IoUid},
		{"IoGid", &c.IoGid}, {"CriuImagePath", &c.CriuImagePath}, {"CriuWorkPath", &c.CriuWorkPath},
		{"ShimCgroup", &c.ShimCgroup},
	}
	setOn := make([]int, len(fields)) // the line that set each field, 0 if none
	text := string(data)
	for n := 1; text != ""; n++ {
		line, rest, found := strings.Cut(text, "\n")
		text = rest
		if found {
			line = strings.TrimSuffix(line, "\r")
		}
		key, val, ok, err := parseLine(line)
		if err != nil {
			return runcConfig{}, &configLineError{n, err}
		}
		if !ok {
			continue
		}
		// Not strings.EqualFold: go-toml lowers the key, so U+017F (ſ) does not match s.
		lower, i := strings.ToLower(key), -1
		for j, f := range fields {
			if lower == strings.ToLower(f.name) {
				i = j
				break
			}
		}
		if i < 0 {
			return runcConfig{}, &configLineError{n, fmt.Errorf("unknown key %q", key)}
		}
		if setOn[i] != 0 {
			return runcConfig{}, &configLineError{n, fmt.Errorf("%s is already set on line %d", fields[i].name, setOn[i])}
		}
		setOn[i] = n
		if err := assign(fields[i].dst, val); err != nil {
			return runcConfig{}, &configLineError{n, fmt.Errorf("%s: %w", fields[i].name, err)}
		}
	}
	return c, nil
}

// configLineError is the failure of one line of a config.
type configLineError struct {
	line int
	err  error
}

func (e *configLineError) Error() string { return fmt.Sprintf("line %d: %v", e.line, e.err) }
func (e *configLineError) Unwrap() error { return e.err }

// configFileError says where a config read from a file is wrong without quoting any of it: the
// file may be one the caller could not read itself, and the shim, as root, could.
func configFileError(err error) string {
	var le *configLineError
	if errors.As(err, &le) {
		return fmt.Sprintf("line %d is not valid runc options", le.line)
	}
	return "not valid runc options"
}

// maxConfigFile bounds a config file: a few lines are expected, and it is read whole.
const maxConfigFile = 1 << 20

// readConfigFile reads the config file at path, which must be a regular file of at most
// maxConfigFile bytes. The path is opened once as an O_PATH handle, which opens no device and
// blocks on no FIFO; the handle is checked and the same inode reopened through /proc/self/fd
// without blocking, so nothing swapped in after the check is read.
func readConfigFile(path string) ([]byte, error) {
	h, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open runtime config: %w", &os.PathError{Op: "open", Path: path, Err: err})
	}
	defer unix.Close(h)
	var st unix.Stat_t
	if err := unix.Fstat(h, &st); err != nil {
		return nil, fmt.Errorf("stat runtime config %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size > maxConfigFile {
		return nil, fmt.Errorf("runtime config %s is not a regular file of at most 1 MiB: %w", path, errdefs.ErrInvalidArgument)
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", h), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open runtime config %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	// Bounded again: the file may grow after the check.
	data, err := io.ReadAll(io.LimitReader(f, maxConfigFile+1))
	if err != nil {
		return nil, fmt.Errorf("read runtime config %s: %w", path, err)
	}
	if len(data) > maxConfigFile {
		return nil, fmt.Errorf("runtime config %s is not a regular file of at most 1 MiB: %w", path, errdefs.ErrInvalidArgument)
	}
	return data, nil
}

// assign stores val, a string, bool or the text of an integer, in dst if their types agree.
func assign(dst, val any) error {
	switch dst := dst.(type) {
	case *string:
		if v, ok := val.(string); ok {
			*dst = v
			return nil
		}
	case *bool:
		if v, ok := val.(bool); ok {
			*dst = v
			return nil
		}
	case *uint32:
		if v, ok := val.(integer); ok {
			u, err := parseUint32(string(v))
			*dst = u
			return err
		}
	}
	return fmt.Errorf("want a %s, not %s", kindOf(dst), kindOf(val))
}

// integer is the text of a value that looks like an integer; it is checked once its field,
// and so its range, is known.
type integer string

func kindOf(v any) string {
	switch v.(type) {
	case string, *string:
		return "string"
	case bool, *bool:
		return "boolean"
	default:
		return "integer"
	}
}

// parseLine parses one line, without its line end. ok is false for a blank or comment line.
func parseLine(line string) (key string, val any, ok bool, err error) {
	s := skipSpace(line)
	if s == "" || s[0] == '#' {
		return "", nil, false, checkComment(s)
	}
	if s[0] == '[' {
		return "", nil, false, errors.New("tables are not supported")
	}
	key, s, err = parseKey(s)
	if err != nil {
		return "", nil, false, err
	}
	s = skipSpace(s)
	switch {
	case s != "" && s[0] == '.':
		return "", nil, false, errors.New("dotted keys are not supported")
	case s == "" || s[0] != '=':
		return "", nil, false, fmt.Errorf("want = after key %q", key)
	}
	s = skipSpace(s[1:])
	if val, s, err = parseValue(s); err != nil {
		return "", nil, false, fmt.Errorf("%s: %w", key, err)
	}
	s = skipSpace(s)
	if s != "" && s[0] != '#' {
		return "", nil, false, fmt.Errorf("%s: unexpected %q after the value", key, s)
	}
	return key, val, true, checkComment(s)
}

func skipSpace(s string) string { return strings.TrimLeft(s, " \t") }

// checkComment refuses the control characters TOML does not allow in a comment.
func checkComment(s string) error {
	if i := strings.IndexFunc(s, isControl); i >= 0 {
		return fmt.Errorf("control character %q in a comment", s[i])
	}
	return nil
}

// isControl reports whether r is a control character TOML allows only escaped: all but tab.
func isControl(r rune) bool { return r != '\t' && (r < 0x20 || r == 0x7f) }

func isBareKeyChar(b byte) bool {
	return b >= 'A' && b <= 'Z' || b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '_' || b == '-'
}

func parseKey(s string) (key, rest string, err error) {
	switch s[0] {
	case '"':
		return parseBasic(s)
	case '\'':
		return parseLiteral(s)
	}
	i := 0
	for i < len(s) && isBareKeyChar(s[i]) {
		i++
	}
	if i == 0 {
		return "", "", fmt.Errorf("unexpected %q where a key should start", s)
	}
	return s[:i], s[i:], nil
}

// parseValue parses the value at the start of s and returns it as a string, a bool or an
// integer, with the rest of s.
func parseValue(s string) (any, string, error) {
	if s == "" {
		return nil, "", errors.New("missing value")
	}
	switch s[0] {
	case '"':
		if strings.HasPrefix(s, `"""`) {
			return nil, "", errors.New("multi-line strings are not supported")
		}
		return parseBasic(s)
	case '\'':
		if strings.HasPrefix(s, "'''") {
			return nil, "", errors.New("multi-line strings are not supported")
		}
		return parseLiteral(s)
	case '[':
		return nil, "", errors.New("arrays are not supported")
	case '{':
		return nil, "", errors.New("inline tables are not supported")
	}
	end := strings.IndexAny(s, " \t#")
	if end < 0 {
		end = len(s)
	}
	word, rest := s[:end], s[end:]
	switch {
	case word == "":
		return nil, "", errors.New("missing value")
	case word == "true":
		return true, rest, nil
	case word == "false":
		return false, rest, nil
	case isIntegerStart(word[0]):
		// Checked only in parseUint32; a float or date fails there as "not an integer".
		return integer(word), rest, nil
	}
	return nil, "", fmt.Errorf("unsupported value %q (want a string, true, false or an integer)", word)
}

func isIntegerStart(b byte) bool { return b >= '0' && b <= '9' || b == '+' || b == '-' }

// parseUint32 parses a TOML integer (decimal with an optional sign, or 0x, 0o or 0b without
// one; underscores only between digits; no leading zeros in decimal) into a uint32.
func parseUint32(s string) (uint32, error) {
	bad := fmt.Errorf("%s is not an integer (floats and dates are not supported)", s)
	base, digits, neg := uint64(10), s, false
	switch {
	case strings.HasPrefix(s, "0x"):
		base, digits = 16, s[2:]
	case strings.HasPrefix(s, "0o"):
		base, digits = 8, s[2:]
	case strings.HasPrefix(s, "0b"):
		base, digits = 2, s[2:]
	default:
		if s[0] == '+' || s[0] == '-' {
			neg, digits = s[0] == '-', s[1:]
		}
		if len(digits) > 1 && digits[0] == '0' {
			return 0, bad
		}
	}
	var v uint64
	for i := 0; i < len(digits); i++ {
		b := digits[i]
		if b == '_' {
			if i == 0 || i == len(digits)-1 || digits[i+1] == '_' {
				return 0, bad
			}
			continue
		}
		d := digitValue(b)
		if d >= base {
			return 0, bad
		}
		if v = v*base + d; v > math.MaxUint32 {
			// Keep validating the text so that a malformed number is not reported as large.
			v = math.MaxUint32 + 1
		}
	}
	switch {
	case digits == "":
		return 0, bad
	case v > math.MaxUint32 || neg && v != 0:
		return 0, fmt.Errorf("%s is out of range (0 to %d)", s, uint64(math.MaxUint32))
	}
	return uint32(v), nil
}

// digitValue returns the value of a hexadecimal digit, or 16 or more for any other byte.
func digitValue(b byte) uint64 {
	switch {
	case b >= '0' && b <= '9':
		return uint64(b - '0')
	case b >= 'a' && b <= 'f':
		return uint64(b-'a') + 10
	case b >= 'A' && b <= 'F':
		return uint64(b-'A') + 10
	}
	return 16
}

// parseLiteral parses the single-line literal string at the start of s, which opens with '.
func parseLiteral(s string) (string, string, error) {
	end := strings.IndexByte(s[1:], '\'')
	if end < 0 {
		return "", "", errors.New("unterminated literal string")
	}
	v := s[1 : 1+end]
	if i := strings.IndexFunc(v, isControl); i >= 0 {
		return "", "", fmt.Errorf("control character %q in a literal string", v[i])
	}
	return v, s[end+2:], nil
}

// parseBasic parses the single-line basic string at the start of s, which opens with ", and
// resolves its escapes.
func parseBasic(s string) (string, string, error) {
	var b strings.Builder
	for i := 1; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '"':
			return b.String(), s[i+1:], nil
		case r == '\\':
			n, err := unescape(&b, s[i:])
			if err != nil {
				return "", "", err
			}
			i += n
			continue
		case isControl(r):
			return "", "", fmt.Errorf("control character %q in a string", r)
		}
		b.WriteRune(r)
		i += size
	}
	return "", "", errors.New("unterminated string")
}

// unescape writes the character the escape at the start of s stands for and returns the
// escape's length.
func unescape(b *strings.Builder, s string) (int, error) {
	if len(s) < 2 {
		return 0, errors.New("unterminated string")
	}
	if i := strings.IndexByte(`btnfr"\`, s[1]); i >= 0 {
		b.WriteByte("\b\t\n\f\r\"\\"[i])
		return 2, nil
	}
	n := 0
	switch s[1] {
	case 'u':
		n = 4
	case 'U':
		n = 8
	default:
		r, _ := utf8.DecodeRuneInString(s[1:])
		return 0, fmt.Errorf("invalid escape \\%c in a string", r)
	}
	if len(s) < 2+n {
		return 0, fmt.Errorf("short escape %q", s)
	}
	var r uint64
	for i := 2; i < 2+n; i++ {
		d := digitValue(s[i])
		if d >= 16 {
			return 0, fmt.Errorf("invalid escape %q", s[:2+n])
		}
		r = r<<4 | d
	}
	if r > utf8.MaxRune || !utf8.ValidRune(rune(r)) {
		return 0, fmt.Errorf("escape %q is not a Unicode scalar value", s[:2+n])
	}
	b.WriteRune(rune(r))
	return 2 + n, nil
}
