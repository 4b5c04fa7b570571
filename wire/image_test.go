package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	_ "image/jpeg"
	_ "image/png"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/media"
)

// testImages returns images of the given sizes, PNG and JPEG in turn, for the wire.
func testImages(t testing.TB, sizes ...[2]int) []Image {
	t.Helper()
	imgs := make([]Image, len(sizes))
	for i, sz := range sizes {
		f := media.PNG
		if i%2 == 1 {
			f = media.JPEG
		}
		raw, err := media.Encode(sz[0], sz[1], uint64(i), f)
		if err != nil {
			t.Fatal(err)
		}
		imgs[i] = Image{MIME: f.MIME(), Base64: media.AppendBase64(nil, raw)}
	}
	return imgs
}

// decodedSize decodes a base64 image and returns its size and format.
func decodedSize(t *testing.T, b64 string) (w, h int, format string) {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatalf("image data is not base64: %v", err)
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("image data does not decode: %v", err)
	}
	return cfg.Width, cfg.Height, format
}

// dataURL splits a data URL into its media type and base64 data.
func dataURL(t *testing.T, u string) (mime, data string) {
	t.Helper()
	rest, ok := strings.CutPrefix(u, "data:")
	mime, data, ok2 := strings.Cut(rest, ";base64,")
	if !ok || !ok2 {
		t.Fatalf("not a base64 data URL: %.40q", u)
	}
	return mime, data
}

// The request shapes of each API's reference, as far as a user message with images goes.
type (
	// OpenAI chat: messages[].content[] of text and image_url parts.
	chatImageBody struct {
		Messages []struct {
			Role    string `json:"role"`
			Content []struct {
				Type     string  `json:"type"`
				Text     *string `json:"text"`
				ImageURL *struct {
					URL string `json:"url"`
				} `json:"image_url"`
			} `json:"content"`
		} `json:"messages"`
		Tools []json.RawMessage `json:"tools"`
	}
	// Anthropic Messages: messages[].content[] of image blocks with a base64 source, and
	// text blocks.
	messagesImageBody struct {
		Messages []struct {
			Role    string `json:"role"`
			Content []struct {
				Type   string  `json:"type"`
				Text   *string `json:"text"`
				Source *struct {
					Type      string `json:"type"`
					MediaType string `json:"media_type"`
					Data      string `json:"data"`
				} `json:"source"`
			} `json:"content"`
		} `json:"messages"`
		Tools []json.RawMessage `json:"tools"`
	}
	// OpenAI Responses: input[] messages whose content[] is input_text and input_image.
	responsesImageBody struct {
		Input []struct {
			Role    string `json:"role"`
			Content []struct {
				Type     string  `json:"type"`
				Text     *string `json:"text"`
				ImageURL *string `json:"image_url"`
				Detail   *string `json:"detail"`
			} `json:"content"`
		} `json:"input"`
		Tools []json.RawMessage `json:"tools"`
	}
)

// sentImage is what a body carried for one image.
type sentImage struct {
	w, h int
	mime string
}

// parseImageBody decodes a body of kind k by its reference's shape (strictly: a field
// the shape does not name is an error) and returns its one user message's text and
// images, in order, and the number of tools.
func parseImageBody(t *testing.T, k API, body []byte) (text string, imgs []sentImage, tools int) {
	t.Helper()
	dec := func(v any) {
		d := json.NewDecoder(bytes.NewReader(body))
		if err := d.Decode(v); err != nil {
			t.Fatalf("%s body does not decode by the reference's shape: %v\n%.300s", k, err, body)
		}
	}
	add := func(u string) {
		mime, data := dataURL(t, u)
		w, h, format := decodedSize(t, data)
		if mime != "image/"+format {
			t.Errorf("%s: data URL says %s, the bytes are %s", k, mime, format)
		}
		imgs = append(imgs, sentImage{w, h, mime})
	}
	switch k {
	case APIChat:
		var r chatImageBody
		dec(&r)
		if len(r.Messages) != 1 || r.Messages[0].Role != "user" {
			t.Fatalf("chat: want one user message, got %+v", r.Messages)
		}
		for _, p := range r.Messages[0].Content {
			switch {
			case p.Type == "text" && p.Text != nil && len(imgs) == 0:
				text += *p.Text
			case p.Type == "image_url" && p.ImageURL != nil:
				add(p.ImageURL.URL)
			default:
				t.Errorf("chat: unexpected part %+v", p)
			}
		}
		tools = len(r.Tools)
	case APIMessages:
		var r messagesImageBody
		dec(&r)
		if len(r.Messages) != 1 || r.Messages[0].Role != "user" {
			t.Fatalf("messages: want one user message, got %+v", r.Messages)
		}
		for _, p := range r.Messages[0].Content {
			switch {
			case p.Type == "image" && p.Source != nil && p.Source.Type == "base64" && text == "":
				w, h, format := decodedSize(t, p.Source.Data)
				if p.Source.MediaType != "image/"+format {
					t.Errorf("messages: media_type %s, the bytes are %s", p.Source.MediaType, format)
				}
				imgs = append(imgs, sentImage{w, h, p.Source.MediaType})
			case p.Type == "text" && p.Text != nil:
				text += *p.Text
			default:
				t.Errorf("messages: unexpected block %+v (images go before the text)", p)
			}
		}
		tools = len(r.Tools)
	case APIResponses:
		var r responsesImageBody
		dec(&r)
		if len(r.Input) != 1 || r.Input[0].Role != "user" {
			t.Fatalf("responses: want one user input message, got %+v", r.Input)
		}
		for _, p := range r.Input[0].Content {
			switch {
			case p.Type == "input_text" && p.Text != nil && len(imgs) == 0:
				text += *p.Text
			case p.Type == "input_image" && p.ImageURL != nil && p.Detail != nil && *p.Detail == "auto":
				add(*p.ImageURL)
			default:
				t.Errorf("responses: unexpected part %+v", p)
			}
		}
		tools = len(r.Tools)
	default:
		t.Fatalf("no reference shape for %s", k)
	}
	return text, imgs, tools
}

// TestImageBodies: every kind that takes images, with and without tools and with every
// backend, sends the prompt's text and each image, decoded back to its size and format,
// in the API's reference shape; the rest of the body is the body without images'.
func TestImageBodies(t *testing.T) {
	prompt := "describe \"these\"\n\x01 é" + strings.Repeat(" word", 20)
	sizes := [][2]int{{64, 48}, {30, 20}, {17, 91}}
	imgs := testImages(t, sizes...)
	desc := AppendJSONContent(nil, []byte("a tool"))
	kinds := 0
	for _, a := range APIs() {
		k, _ := Lookup(a)
		if k.AppendUserMessage == nil {
			continue
		}
		kinds++
		for _, be := range []Backend{BackendVLLM, BackendSGLang, BackendOpenAI} {
			for _, withTools := range []bool{false, true} {
				e, err := NewEncoder(a, be, false)
				if err != nil {
					t.Fatal(err)
				}
				if withTools {
					e = e.WithTools(desc)
				}
				if !e.TakesImages() {
					t.Fatalf("%s: TakesImages false with AppendUserMessage set", a)
				}
				start := e.AppendStart(nil, "m")
				body := e.WithImages(imgs).AppendBody(nil, start, []byte(prompt), 10)
				if !json.Valid(body) {
					t.Fatalf("%s: body is not JSON: %.300s", a, body)
				}
				text, got, tools := parseImageBody(t, a, body)
				if text != prompt {
					t.Errorf("%s: text %q, want %q", a, text, prompt)
				}
				if len(got) != len(sizes) {
					t.Fatalf("%s: %d images, want %d", a, len(got), len(sizes))
				}
				for i, g := range got {
					if g.w != sizes[i][0] || g.h != sizes[i][1] || g.mime != imgs[i].MIME {
						t.Errorf("%s: image %d is %dx%d %s, want %dx%d %s", a, i, g.w, g.h, g.mime, sizes[i][0], sizes[i][1], imgs[i].MIME)
					}
				}
				if want := map[bool]int{false: 0, true: 1}[withTools]; tools != want {
					t.Errorf("%s: %d tools, want %d", a, tools, want)
				}
				// Everything before the prompt's fields is the plain body's.
				plain := e.AppendBody(nil, start, []byte(prompt), 10)
				cut := bytes.Index(plain, []byte(`"input":`))
				if a != APIResponses {
					cut = bytes.Index(plain, []byte(`"messages":`))
				}
				if cut < 0 || !bytes.HasPrefix(body, plain[:cut]) {
					t.Errorf("%s: the body's fields before the prompt differ from the plain body's", a)
				}
			}
		}
	}
	if kinds != 3 {
		t.Errorf("%d kinds take images, want chat, messages and responses", kinds)
	}
}

// TestImagesWithoutText: an empty text sends no text part (Anthropic refuses an empty
// text block); the message is the images alone.
func TestImagesWithoutText(t *testing.T) {
	imgs := testImages(t, [2]int{20, 10})
	for _, a := range []API{APIChat, APIMessages, APIResponses} {
		e, _ := NewEncoder(a, BackendVLLM, false)
		body := e.WithImages(imgs).AppendBody(nil, e.AppendStart(nil, "m"), nil, 5)
		text, got, _ := parseImageBody(t, a, body)
		if text != "" || len(got) != 1 || got[0].w != 20 || got[0].h != 10 {
			t.Errorf("%s: text %q, images %+v", a, text, got)
		}
		if bytes.Contains(body, []byte(`"text":""`)) {
			t.Errorf("%s: an empty text part was sent", a)
		}
	}
}

// TestNoImagesSameBody: without images, or for a kind that takes none (completions),
// WithImages changes nothing, byte for byte.
func TestNoImagesSameBody(t *testing.T) {
	imgs := testImages(t, [2]int{8, 8})
	for _, a := range APIs() {
		e, _ := NewEncoder(a, BackendVLLM, false)
		start := e.AppendStart(nil, "m")
		plain := e.AppendBody(nil, start, []byte("hi"), 3)
		if got := e.WithImages(nil).AppendBody(nil, start, []byte("hi"), 3); !bytes.Equal(got, plain) {
			t.Errorf("%s: WithImages(nil) changed the body:\n%s\n%s", a, got, plain)
		}
		k, _ := Lookup(a)
		if k.AppendUserMessage == nil {
			if e.TakesImages() {
				t.Errorf("%s: TakesImages true without AppendUserMessage", a)
			}
			if got := e.WithImages(imgs).AppendBody(nil, start, []byte("hi"), 3); !bytes.Equal(got, plain) {
				t.Errorf("%s takes no images, yet its body changed", a)
			}
		}
	}
}

// TestUserMessageInConversation: a kind's user message is one JSON object, which a
// conversation's messages take as they are (AppendMessagesBody).
func TestUserMessageInConversation(t *testing.T) {
	imgs := testImages(t, [2]int{12, 34}, [2]int{56, 7})
	for _, a := range []API{APIChat, APIMessages, APIResponses} {
		k, _ := Lookup(a)
		msg := k.AppendUserMessage(nil, AppendJSONContent(nil, []byte("look")), imgs)
		var obj map[string]any
		if err := json.Unmarshal(msg, &obj); err != nil {
			t.Fatalf("%s: user message is not one JSON object: %v", a, err)
		}
		e, _ := NewEncoder(a, BackendVLLM, false)
		body := e.AppendMessagesBody(nil, e.AppendStart(nil, "m"), msg, 4)
		text, got, _ := parseImageBody(t, a, body)
		if text != "look" || len(got) != 2 || got[1].w != 56 || got[1].h != 7 {
			t.Errorf("%s: text %q, images %+v", a, text, got)
		}
	}
}

// BenchmarkAppendBodyImages builds a chat body with two 1024x1024 JPEGs (about 200 kB of
// base64 each) into a reused buffer: each image is appended once, so a body costs about
// what copying its bytes does, and nothing is allocated once the buffer has grown.
func BenchmarkAppendBodyImages(b *testing.B) {
	imgs := testImages(b, [2]int{1024, 1024}, [2]int{1024, 1024})
	imgs[0] = imgs[1] // both JPEG
	prompt := []byte(strings.Repeat("word ", 1000))
	for _, a := range []API{APIChat, APIMessages, APIResponses} {
		b.Run(string(a), func(b *testing.B) {
			e, _ := NewEncoder(a, BackendVLLM, false)
			e = e.WithImages(imgs)
			start := e.AppendStart(nil, "model")
			var buf []byte
			b.ReportAllocs()
			for b.Loop() {
				buf = e.AppendBody(buf[:0], start, prompt, 100)
			}
			b.SetBytes(int64(len(buf)))
			b.ReportMetric(float64(len(buf)), "body-bytes")
		})
	}
}
