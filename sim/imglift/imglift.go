// Package imglift cuts the bytes of the images a JSON request body carries out of it
// before the body is parsed, leaving a short placeholder in each one's place: a 400 kB
// body with two images becomes a few hundred bytes that encoding/json scans in
// microseconds, instead of the milliseconds of scanning the images' base64 at every level
// of a parse that decodes a request's content in stages. The simulated engine's handlers
// use it; the parse then resolves each placeholder with Blob.
package imglift

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// mark starts the placeholder that stands for an image's bytes lifted out of a body: a
// NUL (which no decoded text of a request carries by chance) and a per-process nonce.
var mark = fmt.Sprintf(`\u0000simimg%016x:`, rand.Uint64())

// MarkDecoded is the placeholder's start as encoding/json decodes it: a decoded text that
// contains it holds a placeholder that did not end in an image.
var MarkDecoded = "\x00" + mark[len(`\u0000`):]

// Lift returns body with the bytes of each image it carries (a JSON string that is a
// base64 data URL, or the value of a "data" key: Anthropic's base64 source) cut out and
// a placeholder in their place, and the bytes cut, which alias body. Strings with
// escapes are left as they are. A body that is not JSON comes back as it is, for the
// parser to word its error.
func Lift(body []byte) (small []byte, blobs [][]byte) {
	last := 0
	for i := 0; i < len(body); {
		q := bytes.IndexByte(body[i:], '"')
		if q < 0 {
			break
		}
		start := i + q + 1
		end := start
		for {
			k := bytes.IndexByte(body[end:], '"')
			if k < 0 {
				return body, nil
			}
			end += k
			bs := 0
			for m := end - 1; m >= start && body[m] == '\\'; m-- {
				bs++
			}
			if bs%2 == 0 {
				break
			}
			end++
		}
		i = end + 1
		s := body[start:end]
		if len(s) < 64 || !imageString(body, start, s) || bytes.IndexByte(s, '\\') >= 0 {
			continue
		}
		if small == nil {
			small = make([]byte, 0, 4096)
		}
		small = append(small, body[last:start]...)
		small = append(small, mark...)
		small = strconv.AppendInt(small, int64(len(blobs)), 10)
		blobs = append(blobs, s)
		last = end
	}
	if blobs == nil {
		return body, nil
	}
	return append(small, body[last:]...), blobs
}

// imageString reports whether the JSON string s, which starts at body[start], holds an
// image's bytes: a base64 data URL, or the value of a "data" key.
func imageString(body []byte, start int, s []byte) bool {
	if bytes.HasPrefix(s, []byte("data:")) {
		return bytes.Contains(s[:min(len(s), 256)], []byte(";base64,"))
	}
	k := bytes.TrimRight(body[:start-1], " \t\r\n")
	if len(k) == 0 || k[len(k)-1] != ':' {
		return false
	}
	return bytes.HasSuffix(bytes.TrimRight(k[:len(k)-1], " \t\r\n"), []byte(`"data"`))
}

// Blob resolves s, a string of the parsed small body: the bytes Lift cut out in its
// place when it is a placeholder (placeholder true; ok false when it names no blob of
// blobs), else s itself.
func Blob(s string, blobs [][]byte) (src []byte, placeholder, ok bool) {
	rest, cut := strings.CutPrefix(s, MarkDecoded)
	if !cut {
		return []byte(s), false, true
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 || n >= len(blobs) {
		return nil, true, false
	}
	return blobs[n], true, true
}
