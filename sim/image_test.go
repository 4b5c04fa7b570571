package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/media"
	"github.com/llmreplay/llmreplay/sim/imglift"
	"github.com/llmreplay/llmreplay/wire"
)

// wireImages makes images of the given sizes as a replay sends them, JPEG and PNG in turn.
func wireImages(t *testing.T, sizes ...[2]int) []wire.Image {
	t.Helper()
	out := make([]wire.Image, len(sizes))
	for i, sz := range sizes {
		f := media.JPEG
		if i%2 == 1 {
			f = media.PNG
		}
		raw, err := media.Encode(sz[0], sz[1], uint64(100+i), f)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = wire.Image{MIME: f.MIME(), Base64: media.AppendBase64(nil, raw)}
	}
	return out
}

// streamedPrompt sends a streamed body of api and returns the prompt tokens its usage says.
func streamedPrompt(t *testing.T, base string, api wire.API, body []byte) int {
	t.Helper()
	path := map[wire.API]string{wire.APIChat: "/v1/chat/completions", wire.APIMessages: "/v1/messages", wire.APIResponses: "/v1/responses"}[api]
	resp, b := postRaw(t, base+path, string(body))
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %d %s", api, resp.StatusCode, b)
	}
	evs := readSSE(t, bytes.NewReader(b))
	switch api {
	case wire.APIMessages:
		return decodeMessages(t, evs).prompt
	case wire.APIResponses:
		return decodeResponses(t, evs).prompt
	}
	return decodeChat(t, evs).prompt
}

// TestImageTokensInUsage: a body with images of known sizes, built by the client's
// encoder for each API, has usage.prompt_tokens = its text's tokens + the rule's tokens
// of each image, exactly; the default rule is qwen2-vl and /sim/info says the rule.
func TestImageTokensInUsage(t *testing.T) {
	sizes := [][2]int{{300, 200}, {64, 48}, {1024, 1024}}
	imgs := wireImages(t, sizes...)
	prompt := []byte("What is in these pictures? Say it briefly.")
	for _, c := range []struct {
		rule string
		want int // worked by hand from the rule
	}{
		// qwen2-vl: 300x200 -> 308x196: 11*7+2 = 79; 64x48 -> 56x56 (min_pixels): 2*2+2 = 6;
		// 1024x1024 -> 1036x1036: 37*37+2 = 1371.
		{"", 79 + 6 + 1371},
		{"fixed:100", 300},
		{"llava-1.5", 3 * 576},
	} {
		cfg := fastFixed()
		cfg.ImageRule = c.rule
		r := startSim(t, cfg)
		base := strings.TrimSuffix(r.BaseURL(), "/v1")
		for _, api := range []wire.API{wire.APIChat, wire.APIMessages, wire.APIResponses} {
			e, err := wire.NewEncoder(api, wire.BackendVLLM, false)
			if err != nil {
				t.Fatal(err)
			}
			start := e.AppendStart(nil, "m")
			p0 := streamedPrompt(t, base, api, e.AppendBody(nil, start, prompt, 2))
			withImages := e.WithImages(imgs).AppendBody(nil, start, prompt, 2)
			p1 := streamedPrompt(t, base, api, withImages)
			if p1-p0 != c.want {
				t.Errorf("rule %q, %s: %d images added %d prompt tokens, want %d", c.rule, api, len(imgs), p1-p0, c.want)
			}
			switch api {
			case wire.APIChat: // /tokenize counts the images too
				_, b := postRaw(t, base+"/tokenize", string(withImages))
				var tk struct{ Count int }
				if json.Unmarshal(b, &tk) != nil || tk.Count != p1 {
					t.Errorf("rule %q: /tokenize says %s, want count %d", c.rule, b, p1)
				}
			case wire.APIMessages: // and so does count_tokens
				_, b := postRaw(t, base+"/v1/messages/count_tokens", string(withImages))
				var ct struct {
					InputTokens int `json:"input_tokens"`
				}
				if json.Unmarshal(b, &ct) != nil || ct.InputTokens != p1 {
					t.Errorf("rule %q: count_tokens says %s, want %d", c.rule, b, p1)
				}
			}
		}
		resp, err := http.Get(base + "/sim/info")
		if err != nil {
			t.Fatal(err)
		}
		var in Info
		err = json.NewDecoder(resp.Body).Decode(&in)
		resp.Body.Close()
		want := c.rule
		if want == "" {
			want = media.DefaultRule
		}
		if err != nil || in.Config.ImageRule != want {
			t.Errorf("/sim/info image_rule %q (%v), want %q", in.Config.ImageRule, err, want)
		}
	}
}

// TestBadImages: an image the sim cannot read is a 400 that names the part, as vLLM
// answers, in every API.
func TestBadImages(t *testing.T) {
	r := startSim(t, fastFixed())
	base := strings.TrimSuffix(r.BaseURL(), "/v1")
	notImage := "data:image/png;base64,aGVsbG8gd29ybGQ=" // "hello world"
	for _, c := range []struct{ path, body, want string }{
		{"/v1/chat/completions", fmt.Sprintf(`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":%q}}]}]}`, notImage),
			"messages[0].content[1].image_url: cannot identify the image"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]}`,
			"messages[0].content[0].image_url: the simulated engine takes images as base64 data URLs"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,!!!"}}]}]}`,
			"messages[0].content[0].image_url: the image is not valid base64"},
		{"/v1/messages", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"aGVsbG8gd29ybGQ="}},{"type":"text","text":"hi"}]}]}`,
			"messages[0].content[0].source.data: cannot identify the image"},
		{"/v1/messages", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}]}]}`,
			"messages[0].content[0].source must be a base64 source"},
		{"/v1/responses", fmt.Sprintf(`{"input":[{"role":"user","content":[{"type":"input_text","text":"hi"},{"type":"input_image","image_url":%q,"detail":"auto"}]}]}`, notImage),
			"input[0].content[1].image_url: cannot identify the image"},
	} {
		resp, b := postRaw(t, base+c.path, c.body)
		if resp.StatusCode != 400 || !bytes.Contains(b, []byte(c.want)) {
			t.Errorf("%s %.80s: %d %s, want 400 saying %q", c.path, c.body, resp.StatusCode, b, c.want)
		}
	}
}

// TestVisionEncoderInTheModel: the engine adds the vision encoder's time to the step that
// admits a request with images, so its first token comes VisionTime later than the same
// prompt's without: the model's own times, no clock.
func TestVisionEncoderInTheModel(t *testing.T) {
	cfg := linear()
	cfg.VisionPerImage, cfg.VisionPerImageToken = 3*time.Millisecond, 10*time.Microsecond
	// Two images of 79 tokens each: 2*3ms + 158*10us = 7.58ms, worked by hand.
	if got, want := cfg.VisionTime(2, 158), 7580*time.Microsecond; got != want {
		t.Fatalf("VisionTime(2, 158) = %v, want %v", got, want)
	}
	first := func(vision time.Duration) (time.Duration, time.Duration) {
		c := newCore(&cfg)
		s := newSeq(150, 5)
		s.visions = []visionSpan{{end: 100, cost: vision}}
		c.enqueue(s, 0)
		runCore(t, c)
		return s.firstM, s.lastM
	}
	f0, l0 := first(0)
	f1, l1 := first(cfg.VisionTime(2, 158))
	if f0 != cfg.PrefillTime(150, 0) {
		t.Fatalf("without images the first token is at %v, want PrefillTime %v", f0, cfg.PrefillTime(150, 0))
	}
	if f1-f0 != 7580*time.Microsecond || l1-l0 != 7580*time.Microsecond {
		t.Errorf("images moved the first token by %v and the last by %v, want 7.58ms both", f1-f0, l1-l0)
	}
}

// TestVisionEncoderThroughTheServer: a request with images, alone on the tiny profile,
// has its first token (model time, from the timing trailers) at the prefill of its whole
// prompt, images' tokens included, plus the profile's vision encoder time.
func TestVisionEncoderThroughTheServer(t *testing.T) {
	cfg, _ := Profile("tiny")
	cfg.TimeScale = 100
	r := startSim(t, cfg)
	imgs := wireImages(t, [2]int{300, 200}, [2]int{64, 48})
	e, _ := wire.NewEncoder(wire.APIChat, wire.BackendVLLM, false)
	body := e.WithImages(imgs).AppendBody(nil, e.AppendStart(nil, cfg.Model), []byte("Describe."), 2)
	res := post(t, http.DefaultClient, r.BaseURL()+"/chat/completions", string(body))
	if res.status != 200 {
		t.Fatalf("status %d: %s", res.status, res.body)
	}
	prompt := int(res.usage["prompt_tokens"].(float64))
	ttft := res.modelNs(t, TrailerFirst) - res.modelNs(t, TrailerAdmit)
	want := cfg.PrefillTime(prompt, 0) + cfg.VisionTime(2, 79+6)
	if ttft != want {
		t.Errorf("model TTFT %v, want PrefillTime(%d) + VisionTime(2, 85) = %v", ttft, prompt, want)
	}
	if cfg.VisionTime(2, 85) != 2*2*time.Millisecond+85*2*time.Microsecond {
		t.Errorf("tiny's vision encoder is not the documented 2 ms an image and 2 us a token")
	}
}

// FuzzImageParts: whatever a request's image parts hold, parsing answers an apiError or
// images of a real size, never a panic.
func FuzzImageParts(f *testing.F) {
	raw, err := media.Encode(9, 5, 1, media.PNG)
	if err != nil {
		f.Fatal(err)
	}
	b64 := string(media.AppendBase64(nil, raw))
	url := "data:image/png;base64," + b64
	for _, s := range []string{
		fmt.Sprintf(`{"messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":%q}}]}]}`, url),
		fmt.Sprintf(`{"model":"m","max_tokens":2,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":%q}}]}]}`, b64),
		fmt.Sprintf(`{"input":[{"role":"user","content":[{"type":"input_image","image_url":%q,"detail":"auto"}]}]}`, url),
	} {
		for api := range uint8(4) {
			f.Add([]byte(s), api)
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, a uint8) {
		p, err := parseGenRequest(body, apiKind(a%4))
		if err != nil {
			if _, ok := err.(*apiError); !ok {
				t.Fatalf("error %T is not an apiError", err)
			}
			return
		}
		for _, m := range p.prompt.messages {
			for _, img := range m.images {
				if img.width < 1 || img.height < 1 {
					t.Fatalf("accepted an image of %dx%d", img.width, img.height)
				}
			}
		}
	})
}

// TestVisionSkipsCachedImages: the encoder runs for the images that end past the cached
// prefix only, so a conversation's next turn, which finds its earlier images cached,
// pays their prefill and their encoder neither.
func TestVisionSkipsCachedImages(t *testing.T) {
	spans := []visionSpan{{end: 100, cost: time.Millisecond}, {end: 200, cost: 2 * time.Millisecond}}
	for _, c := range []struct {
		cached int
		want   time.Duration
	}{{0, 3 * time.Millisecond}, {99, 3 * time.Millisecond}, {100, 2 * time.Millisecond}, {112, 2 * time.Millisecond}, {200, 0}} {
		if got := visionTime(spans, c.cached); got != c.want {
			t.Errorf("visionTime with %d cached = %v, want %v", c.cached, got, c.want)
		}
	}

	cfg, _ := Profile("tiny")
	cfg.TimeScale = 100
	r := startSim(t, cfg)
	imgs := wireImages(t, [2]int{300, 200}, [2]int{64, 48})
	e, _ := wire.NewEncoder(wire.APIChat, wire.BackendVLLM, false)
	k := e.Kind()
	msgs := k.AppendUserMessage(nil, []byte("Look."), imgs)
	msgs = append(msgs, `,{"role":"assistant","content":"Two pictures."},{"role":"user","content":"`...)
	msgs = append(msgs, strings.Repeat("Now say more about them. ", 40)...)
	msgs = append(msgs, `"}`...)
	body := e.AppendMessagesBody(nil, e.AppendStart(nil, cfg.Model), msgs, 2)
	ttft := func() (ttft time.Duration, prompt, cached int) {
		res := post(t, http.DefaultClient, r.BaseURL()+"/chat/completions", string(body))
		if res.status != 200 || res.usage == nil {
			t.Fatalf("status %d, usage %v", res.status, res.usage)
		}
		prompt = int(res.usage["prompt_tokens"].(float64))
		if d, ok := res.usage["prompt_tokens_details"].(map[string]any); ok {
			cached = int(d["cached_tokens"].(float64))
		}
		return res.modelNs(t, TrailerFirst) - res.modelNs(t, TrailerAdmit), prompt, cached
	}
	t1, p1, c1 := ttft()
	if want := cfg.PrefillTime(p1, 0) + cfg.VisionTime(2, 79+6); c1 != 0 || t1 != want {
		t.Fatalf("first send: TTFT %v with %d cached, want %v with none", t1, c1, want)
	}
	t2, p2, c2 := ttft()
	if p2 != p1 || c2 < p1-cfg.PrefixBlockTokens {
		t.Fatalf("second send: %d prompt tokens, %d cached; want %d and all but the last block", p2, c2, p1)
	}
	if want := cfg.PrefillTime(p2, c2); t2 != want {
		t.Errorf("second send: TTFT %v, want the uncached prefill alone, %v (the images are cached: no encoder)", t2, want)
	}
}

// BenchmarkParseImageRequest measures the handler's reading of a body with two
// 1024x1024 JPEGs (518 kB): JSON, base64 and the images' headers, all before the request
// reaches the engine; whole-body is the same chat body parsed without lifting the
// images out (imglift.Lift), for comparison.
func BenchmarkParseImageRequest(b *testing.B) {
	imgs := make([]wire.Image, 2)
	for i := range imgs {
		raw, err := media.Encode(1024, 1024, uint64(i), media.JPEG)
		if err != nil {
			b.Fatal(err)
		}
		imgs[i] = wire.Image{MIME: "image/jpeg", Base64: media.AppendBase64(nil, raw)}
	}
	for _, a := range []wire.API{wire.APIChat, wire.APIMessages, wire.APIResponses} {
		b.Run(string(a), func(b *testing.B) {
			e, _ := wire.NewEncoder(a, wire.BackendVLLM, false)
			body := e.WithImages(imgs).AppendBody(nil, e.AppendStart(nil, "m"), []byte("Describe them."), 10)
			api := map[wire.API]apiKind{wire.APIChat: apiChat, wire.APIMessages: apiMessages, wire.APIResponses: apiResponses}[a]
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				p, err := parseGenRequest(body, api)
				if err != nil || len(p.prompt.messages[len(p.prompt.messages)-1].images) != 2 {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("whole-body", func(b *testing.B) {
		e, _ := wire.NewEncoder(wire.APIChat, wire.BackendVLLM, false)
		body := e.WithImages(imgs).AppendBody(nil, e.AppendStart(nil, "m"), []byte("Describe them."), 10)
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			p, err := parseGenBody(body, apiChat)
			if err != nil {
				b.Fatal(err)
			}
			if _, aerr := loadImages(p.prompt.messages, nil); aerr != nil {
				b.Fatal(aerr)
			}
		}
	})
}

// TestLiftImagesSameParse: parsing with the images' bytes lifted out of the body gives
// what parsing the whole body gives (texts, tools, image sizes and keys), and a data URL
// sent as text, escaped base64, or a "data" key elsewhere do not fool it.
func TestLiftImagesSameParse(t *testing.T) {
	imgs := wireImages(t, [2]int{300, 200}, [2]int{64, 48})
	url := "data:" + imgs[0].MIME + ";base64," + string(imgs[0].Base64)
	escaped := strings.ReplaceAll(string(imgs[1].Base64), "/", `\/`)
	var bodies []struct {
		api  apiKind
		body string
	}
	for _, a := range []wire.API{wire.APIChat, wire.APIMessages, wire.APIResponses} {
		e, _ := wire.NewEncoder(a, wire.BackendVLLM, false)
		b := e.WithImages(imgs).WithTools([]byte("a tool")).AppendBody(nil, e.AppendStart(nil, "m"), []byte("Describe."), 2)
		api := map[wire.API]apiKind{wire.APIChat: apiChat, wire.APIMessages: apiMessages, wire.APIResponses: apiResponses}[a]
		bodies = append(bodies, struct {
			api  apiKind
			body string
		}{api, string(b)})
	}
	bodies = append(bodies, []struct {
		api  apiKind
		body string
	}{
		// A data URL as the text: the placeholder lands in a text, and the whole body is parsed.
		{apiChat, fmt.Sprintf(`{"messages":[{"role":"user","content":[{"type":"text","text":%q},{"type":"image_url","image_url":{"url":%q}}]}]}`, url, url)},
		// Escaped base64 (a JSON encoder that escapes '/') is not lifted, and reads the same.
		{apiMessages, fmt.Sprintf(`{"model":"m","max_tokens":2,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"%s"}}]}]}`, escaped)},
		// Spaces around a "data" key, and a "data" key the parser ignores.
		{apiMessages, fmt.Sprintf(`{"model":"m","max_tokens":2,"extra":{"data" : %q},"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/jpeg","data" :	%q}}]}]}`, string(imgs[1].Base64), string(imgs[0].Base64))},
	}...)
	for i, c := range bodies {
		got, err := parseGenRequest([]byte(c.body), c.api)
		if err != nil {
			t.Fatalf("body %d: %v", i, err)
		}
		want, err := parseGenBody([]byte(c.body), c.api)
		if err != nil {
			t.Fatal(err)
		}
		if _, aerr := loadImages(want.prompt.messages, nil); aerr != nil {
			t.Fatal(aerr)
		}
		if fmt.Sprint(got.prompt) != fmt.Sprint(want.prompt) {
			t.Errorf("body %d: lifted parse\n%+v\nwhole parse\n%+v", i, got.prompt, want.prompt)
		}
		n := 0
		for _, m := range got.prompt.messages {
			n += len(m.images)
			if strings.Contains(m.content, imglift.MarkDecoded) {
				t.Errorf("body %d: a placeholder is left in a text", i)
			}
		}
		if n == 0 {
			t.Errorf("body %d: no images parsed", i)
		}
	}
	if small, blobs := imglift.Lift([]byte(bodies[0].body)); len(blobs) != 2 || len(small) > 1000 {
		t.Errorf("a chat body with 2 images lifted %d blobs, leaving %d bytes", len(blobs), len(small))
	}
}
