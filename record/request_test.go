package record

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/llmreplay/llmreplay/tokenize"
	"github.com/llmreplay/llmreplay/wire"
)

func testParser(t testing.TB, blockTokens, cacheTokens int) *Parser {
	t.Helper()
	enc, err := tokenize.Get(tokenize.CL100kBase)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewParser(ParserOptions{Salt: [32]byte{1, 2, 3}, Encoding: enc, BlockTokens: blockTokens, CacheTokens: cacheTokens})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustParse(t testing.TB, p *Parser, path, body string) Request {
	t.Helper()
	r, err := p.Parse(path, []byte(body))
	if err != nil {
		t.Fatalf("Parse(%s, %s): %v", path, body, err)
	}
	return r
}

func TestAPIOf(t *testing.T) {
	for path, want := range map[string]wire.API{
		"/v1/chat/completions":       wire.APIChat,
		"/chat/completions":          wire.APIChat,
		"/v1/chat/completions/":      wire.APIChat,
		"/v1/chat/completions?x=1":   wire.APIChat,
		"/v1/completions":            wire.APICompletions,
		"/completions":               wire.APICompletions,
		"/v1/messages":               wire.APIMessages,
		"/v1/responses":              wire.APIResponses,
		"/v1/embeddings":             wire.APIEmbeddings,
		"/rerank":                    wire.APIRerank,
		"/v1/rerank":                 wire.APIRerank,
		"/v2/rerank":                 wire.APIRerank,
		"/v1/models":                 "",
		"/v1/responses/resp_1":       "",
		"/v1/threads/t_1/messages":   "",
		"/v1/messages/count_tokens":  "",
		"/v3/chat/completions":       "",
		"/v1/v1/chat/completions":    "",
		"/health":                    "",
		"":                           "",
		"/v1/chat/completions/extra": "",
	} {
		if got := APIOf(path); got != want {
			t.Errorf("APIOf(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestParseUnknownPath(t *testing.T) {
	p := testParser(t, 16, 0)
	r, err := p.Parse("/v1/models", []byte("not json at all"))
	if err != nil || !reflect.DeepEqual(r, Request{}) {
		t.Fatalf("Parse of an unknown path = %+v, %v; want an empty Request and no error", r, err)
	}
}

// TestParseScalars: each API's output cap, n, stream and user from the field its
// reference names.
func TestParseScalars(t *testing.T) {
	p := testParser(t, 16, 0)
	type want struct {
		model             string
		stream, hasStream bool
		max, n            int32
		user, prev        string
	}
	for _, c := range []struct {
		path, body string
		want       want
	}{
		{"/v1/chat/completions", `{"model":"m","stream":true,"max_tokens":100,"n":2,"user":"u1","messages":[]}`,
			want{"m", true, true, 100, 2, "u1", ""}},
		{"/v1/chat/completions", `{"model":"m","max_tokens":100,"max_completion_tokens":50,"messages":[]}`,
			want{"m", false, false, 50, 0, "", ""}},
		{"/v1/chat/completions", `{"model":"m","stream":false,"max_completion_tokens":7.0,"safety_identifier":"s1"}`,
			want{"m", false, true, 7, 0, "s1", ""}},
		{"/v1/chat/completions", `{"model":"m","stream":null,"max_tokens":null,"user":""}`,
			want{"m", false, false, 0, 0, "", ""}},
		{"/v1/completions", `{"model":"c","prompt":"hi","max_tokens":5,"n":3,"max_output_tokens":9}`,
			want{"c", false, false, 5, 3, "", ""}},
		{"/v1/messages", `{"model":"claude","max_tokens":1024,"stream":true,"n":4,"user":"ignored","metadata":{"user_id":"a1"},"messages":[]}`,
			want{"claude", true, true, 1024, 0, "a1", ""}},
		{"/v1/responses", `{"model":"r","max_output_tokens":64,"max_tokens":9,"n":2,"user":"u2","previous_response_id":"resp_1","input":"x"}`,
			want{"r", false, false, 64, 0, "u2", "resp_1"}},
		{"/v1/embeddings", `{"model":"e","input":"x","stream":true,"max_tokens":4,"n":2}`,
			want{"e", false, false, 0, 0, "", ""}},
		{"/v1/rerank", `{"model":"k","query":"q","documents":["a"],"user":"u3"}`,
			want{"k", false, false, 0, 0, "u3", ""}},
	} {
		r := mustParse(t, p, c.path, c.body)
		var user, prev uint64
		if c.want.user != "" {
			user = p.Key(c.want.user)
		}
		if c.want.prev != "" {
			prev = p.Key(c.want.prev)
		}
		got := want{r.Model, r.Stream, r.HasStream, r.MaxTokens, r.N, c.want.user, c.want.prev}
		if got != c.want || r.UserKey != user || r.PrevKey != prev {
			t.Errorf("%s %s: got %+v UserKey %x PrevKey %x, want %+v UserKey %x PrevKey %x", c.path, c.body, got, r.UserKey, r.PrevKey, c.want, user, prev)
		}
	}
}

func TestKey(t *testing.T) {
	p := testParser(t, 16, 0)
	q, err := NewParser(ParserOptions{Salt: [32]byte{9}, Encoding: p.enc})
	if err != nil {
		t.Fatal(err)
	}
	if p.Key("a") != p.Key("a") || p.Key("a") == p.Key("b") || p.Key("a") == q.Key("a") || p.Key("") == 0 {
		t.Errorf("Key: want equal for equal strings and salts, different otherwise, never 0")
	}
	long := strings.Repeat("x", 1000) // longer than Key's buffer
	if p.Key(long) == p.Key(long[:999]) {
		t.Errorf("Key of a long string ignores its tail")
	}
}

// TestParseRoles: the messages of every API in canonical form, with their roles.
func TestParseRoles(t *testing.T) {
	p := testParser(t, 16, 0)
	for _, c := range []struct {
		path, body, roles string
		images            int32
	}{
		{"/v1/chat/completions", `{"messages":[{"role":"system","content":"s"},{"role":"developer","content":"d"},
			{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]},
			{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},
			{"role":"tool","tool_call_id":"c1","content":"42"},{"role":"function","name":"f","content":"x"},{"role":"critic","content":"?"}]}`,
			"ssuatto", 1},
		{"/v1/messages", `{"system":[{"type":"text","text":"sys"}],"messages":[
			{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}},{"type":"text","text":"what"}]},
			{"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"42"},{"type":"image","source":{"type":"url","url":"https://x/y.png"}}]}]},
			{"role":"assistant","content":"ok"},{"role":"user","content":"thanks"}]}`,
			"suatau", 2},
		{"/v1/responses", `{"instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"hi"},{"type":"input_image","image_url":"https://x/a.png","detail":"auto"},{"type":"input_image","file_id":"file_1"}]},
			{"type":"reasoning","id":"rs_1","summary":[]},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
			{"type":"function_call_output","call_id":"c1","output":"42"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"done"}]},
			{"type":"web_search_call","id":"ws"},{"type":"computer_call_output","call_id":"c2","output":{"type":"computer_screenshot"}},{"type":"item_reference","id":"msg_1"}]}`,
			"suaataato", 2},
		{"/v1/responses", `{"input":"hello"}`, "u", 0},
		{"/v1/completions", `{"prompt":"hello"}`, "u", 0},
		{"/v1/completions", `{"prompt":[1,2,3]}`, "u", 0},
		{"/v1/completions", `{"prompt":["a","b"]}`, "uu", 0},
		{"/v1/completions", `{"prompt":[[1,2],[3]]}`, "uu", 0},
		{"/v1/embeddings", `{"input":["a","b","c"]}`, "uuu", 0},
		{"/v1/embeddings", `{"input":[[1,2],[3]]}`, "uu", 0},
		{"/v1/rerank", `{"query":"q","documents":["a",{"text":"b"},{"image":"x"}]}`, "uuuu", 0},
	} {
		r := mustParse(t, p, c.path, c.body)
		if string(r.Roles) != c.roles || r.Images != c.images || len(r.Msgs) != len(r.Roles) {
			t.Errorf("%s %.60s: roles %q images %d (%d hashes), want %q and %d", c.path, c.body, r.Roles, r.Images, len(r.Msgs), c.roles, c.images)
		}
	}
}

// TestCanonical: a conversation sent again with its keys in another order, other
// whitespace, other escapes, string content as a text part, text parts split otherwise
// and the tool call's arguments re-serialised hashes the same; a change of a byte of
// text, a role, an image or an argument does not.
func TestCanonical(t *testing.T) {
	p := testParser(t, 4, 0)
	base := mustParse(t, p, "/v1/chat/completions", `{"model":"m","tools":[{"type":"function","function":{"name":"f","parameters":{"b":1,"a":2}}}],"messages":[
		{"role":"system","content":"You are <helpful>."},
		{"role":"user","content":[{"type":"text","text":"hello "},{"type":"text","text":"world"},{"type":"image_url","image_url":{"url":"https://x/a.png"}}]},
		{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"q\": \"x\", \"n\": 1}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"result"}]}`)
	same := []string{
		`{"messages":[{"content":"You are \u003chelpful\u003e.","role":"system"},
		{"content":[{"text":"hello world","type":"text"},{"image_url":{"url":"https://x/a.png","detail":"auto"},"type":"image_url"}],"role":"user"},
		{"tool_calls":[{"function":{"arguments":"{\"n\":1,\"q\":\"x\"}","name":"f"},"type":"function","id":"c1"}],"content":null,"role":"assistant"},
		{"content":[{"type":"text","text":"result"}],"tool_call_id":"c1","role":"tool"}],
		"tools":[{"function":{"parameters":{"a":2,"b":1},"name":"f"},"type":"function"}],"model":"m"}`,
	}
	for _, s := range same {
		r := mustParse(t, p, "/v1/chat/completions", s)
		if !reflect.DeepEqual(r, base) {
			t.Errorf("re-serialised conversation:\n got %+v\nwant %+v", r, base)
		}
	}
	// Invalid UTF-8 reads as encoding/json reads it, U+FFFD, whether escaped or not.
	raw := mustParse(t, p, "/v1/chat/completions", `{"messages":[{"role":"user","content":"a`+"\xff"+`b"}]}`)
	esc := mustParse(t, p, "/v1/chat/completions", `{"messages":[{"role":"user","content":"a\ufffdb"}]}`)
	if !reflect.DeepEqual(raw, esc) {
		t.Errorf("invalid UTF-8 %x, its replacement escaped %x: want equal", raw.Msgs, esc.Msgs)
	}
	for _, d := range []string{
		strings.Replace(same[0], "hello world", "hello World", 1),
		strings.Replace(same[0], `"role":"system"`, `"role":"user"`, 1),
		strings.Replace(same[0], "a.png", "b.png", 1),
		strings.Replace(same[0], `\"n\":1`, `\"n\":2`, 1),
		strings.Replace(same[0], `"id":"c1"`, `"id":"c2"`, 1),
		// Pieces are length-prefixed: text "ai" then an image "x" is not the text "aix".
		strings.Replace(same[0], `{"text":"hello world","type":"text"},{"image_url":{"url":"https://x/a.png","detail":"auto"},"type":"image_url"}`,
			`{"text":"hello worldihttps://x/a.png","type":"text"}`, 1),
	} {
		r := mustParse(t, p, "/v1/chat/completions", d)
		if r.Msgs[len(r.Msgs)-1] == base.Msgs[len(base.Msgs)-1] {
			t.Errorf("a changed conversation hashes as the original: %.200s", d)
		}
	}
}

// TestMsgsChain: Msgs[j] are equal exactly as far as the leading messages are.
func TestMsgsChain(t *testing.T) {
	p := testParser(t, 16, 0)
	a := mustParse(t, p, "/v1/chat/completions", chatBody("s", "S", "u", "one", "a", "two", "u", "three"))
	b := mustParse(t, p, "/v1/chat/completions", chatBody("s", "S", "u", "one", "a", "2", "u", "three"))
	if a.Msgs[0] != b.Msgs[0] || a.Msgs[1] != b.Msgs[1] || a.Msgs[2] == b.Msgs[2] || a.Msgs[3] == b.Msgs[3] {
		t.Errorf("chains %x and %x: want equal for two messages, then different", a.Msgs, b.Msgs)
	}
	// The same messages in another API hash the same: the canonical form has no API.
	m := mustParse(t, p, "/v1/messages", `{"system":"S","messages":[{"role":"user","content":"one"},{"role":"assistant","content":"two"},{"role":"user","content":"three"}]}`)
	if !reflect.DeepEqual(m.Msgs, a.Msgs) {
		t.Errorf("Anthropic's system + messages %x, chat's %x: want equal", m.Msgs, a.Msgs)
	}
	// Pieces are length-prefixed: bytes moved from one message to the next change both.
	c := mustParse(t, p, "/v1/chat/completions", chatBody("u", "ab", "u", "c"))
	d := mustParse(t, p, "/v1/chat/completions", chatBody("u", "a", "u", "bc"))
	if c.Msgs[1] == d.Msgs[1] {
		t.Errorf("messages ab,c and a,bc hash alike")
	}
}

// chatBody is a chat body of messages given as role, content pairs.
func chatBody(rc ...string) string {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	roles := map[string]string{"s": "system", "u": "user", "a": "assistant", "t": "tool"}
	var ms []msg
	for i := 0; i < len(rc); i += 2 {
		ms = append(ms, msg{roles[rc[i]], rc[i+1]})
	}
	b, _ := json.Marshal(map[string]any{"model": "m", "messages": ms})
	return string(b)
}

// TestParseFields: each field of a message that reaches the model as text counts its
// tokens, and each that tells messages apart changes the hash.
func TestParseFields(t *testing.T) {
	p := testParser(t, 16, 0)
	count := p.enc.Count
	for _, c := range []struct {
		path, body string
		tokens     int
	}{
		{chatPath, `{"messages":[{"role":"assistant","content":null,"refusal":"I can't help with that."}]}`, count("I can't help with that.")},
		{chatPath, `{"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"custom","custom":{"name":"shell","input":"ls -l"}}]}]}`, count("shell\nls -l")},
		{chatPath, `{"messages":[{"role":"assistant","function_call":{"name":"f","arguments":"{\"a\": 1}"}}]}`, count("f\n" + `{"a":1}`)},
		{chatPath, `{"functions":[{"name":"f"}],"messages":[{"role":"user","content":"hi"}]}`, count(`[{"name":"f"}]`) + count("hi")},
		{chatPath, `{"tools":[{"type":"function","function":{"name":"g"}}],"functions":[{"name":"f"}]}`, count(`[{"function":{"name":"g"},"type":"function"}]` + "\n" + `[{"name":"f"}]`)},
		{"/v1/rerank", `{"query":"which","documents":["one",{"text":"two words"}]}`, count("which") + count("one") + count("two words")},
		{"/v1/responses", `{"input":[{"type":"custom_tool_call","call_id":"c","name":"sh","input":"pwd"},{"type":"custom_tool_call_output","call_id":"c","output":[{"type":"input_text","text":"/home"}]}]}`, count("sh\npwd") + count("/home")},
		{"/v1/messages", `{"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"long thoughts"},{"type":"text","text":"ok"}]}]}`, count("ok")},
	} {
		if r := mustParse(t, p, c.path, c.body); int(r.PromptTokens) != c.tokens {
			t.Errorf("%s %s: %d tokens, want %d", c.path, c.body, r.PromptTokens, c.tokens)
		}
	}
	// Pairs that differ in a field the model does not read as text: different hashes.
	for _, c := range []struct{ path, a, b string }{
		{"/v1/responses", `{"input":[{"type":"item_reference","id":"msg_1"}]}`, `{"input":[{"type":"item_reference","id":"msg_2"}]}`},
		{"/v1/responses", `{"input":[{"role":"user","content":[{"type":"input_image","file_id":"file_1"}]}]}`, `{"input":[{"role":"user","content":[{"type":"input_image","file_id":"file_2"}]}]}`},
		{"/v1/messages", `{"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"a"}]}]}`, `{"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"b"}]}]}`},
		{"/v1/messages", `{"messages":[{"role":"assistant","content":[{"type":"redacted_thinking","data":"a"}]}]}`, `{"messages":[{"role":"assistant","content":[{"type":"redacted_thinking","data":"b"}]}]}`},
		{"/v1/messages", `{"messages":[{"role":"user","content":[{"type":"document","source":{"data":"a"}}]}]}`, `{"messages":[{"role":"user","content":[{"type":"document","source":{"data":"b"}}]}]}`},
		{"/v1/rerank", `{"documents":[{"image":"a"}]}`, `{"documents":[{"image":"b"}]}`},
		{chatPath, `{"messages":[{"role":"tool","tool_call_id":"c1","content":"x"}]}`, `{"messages":[{"role":"tool","tool_call_id":"c2","content":"x"}]}`},
	} {
		ra, rb := mustParse(t, p, c.path, c.a), mustParse(t, p, c.path, c.b)
		if len(ra.Msgs) == 0 || reflect.DeepEqual(ra.Msgs, rb.Msgs) {
			t.Errorf("%s: %s and %s hash alike (%x)", c.path, c.a, c.b, ra.Msgs)
		}
	}
}

// TestPromptTokens: the tokens of the tools' canonical JSON and of each message's text.
func TestPromptTokens(t *testing.T) {
	p := testParser(t, 16, 0)
	enc := p.enc
	r := mustParse(t, p, "/v1/chat/completions", `{"tools":[{"type":"function","function":{"name":"get_weather","description":"<b>city</b> & country"}}],"messages":[
		{"role":"system","content":"You are a helpful assistant."},
		{"role":"user","content":[{"type":"text","text":"What is the weather "},{"type":"text","text":"in Paris?"},{"type":"image_url","image_url":{"url":"https://x/a.png"}}]},
		{"role":"assistant","content":"Let me look.","tool_calls":[{"id":"c1","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"sunny"}]}`)
	tools := enc.Count(`[{"function":{"description":"<b>city</b> & country","name":"get_weather"},"type":"function"}]`)
	want := tools + enc.Count("You are a helpful assistant.") + enc.Count("What is the weather in Paris?") +
		enc.Count("Let me look.\nget_weather\n"+`{"city":"Paris"}`) + enc.Count("sunny")
	if int(r.PromptTokens) != want || int(r.ToolTokens) != tools {
		t.Errorf("PromptTokens %d ToolTokens %d, want %d and %d", r.PromptTokens, r.ToolTokens, want, tools)
	}
	ids := mustParse(t, p, "/v1/completions", `{"prompt":[5,6,7,8,9]}`)
	if ids.PromptTokens != 5 {
		t.Errorf("a prompt of 5 token ids: PromptTokens %d", ids.PromptTokens)
	}
	emb := mustParse(t, p, "/v1/embeddings", `{"input":["hello world","good morning"]}`)
	if int(emb.PromptTokens) != enc.Count("hello world")+enc.Count("good morning") {
		t.Errorf("embeddings: PromptTokens %d, want the inputs' sum", emb.PromptTokens)
	}
}

// words returns n distinct words, one token each in cl100k_base (" w0" ... are not, so
// the blocks are checked against the encoding's own ids).
func words(from, n int) string {
	var b strings.Builder
	for i := from; i < from+n; i++ {
		fmt.Fprintf(&b, " w%d", i)
	}
	return b.String()
}

// TestBlocks: block ids are equal exactly as far as the prompts' leading whole blocks of
// tokens are, and only whole blocks get one.
func TestBlocks(t *testing.T) {
	const bt = 16
	p := testParser(t, bt, 0)
	enc := p.enc
	text := words(0, 200)
	ids := enc.Encode(text)
	// b differs from a at token cut: its blocks before cut/bt are a's, the rest not.
	cut := 70
	other := enc.Decode(ids[:cut]) + " zebra" + enc.Decode(ids[cut+1:])
	a := mustParse(t, p, "/v1/completions", fmt.Sprintf(`{"prompt":%q}`, text))
	b := mustParse(t, p, "/v1/completions", fmt.Sprintf(`{"prompt":%q}`, other))
	if len(a.Blocks) != int(a.PromptTokens)/bt {
		t.Fatalf("%d tokens gave %d blocks, want %d (no partial block)", a.PromptTokens, len(a.Blocks), a.PromptTokens/bt)
	}
	shared := 0
	for shared < min(len(a.Blocks), len(b.Blocks)) && a.Blocks[shared] == b.Blocks[shared] {
		shared++
	}
	// The re-encoding of "...zebra..." keeps the tokens before the cut.
	if got := enc.Encode(other); !reflect.DeepEqual(got[:cut], ids[:cut]) {
		t.Fatalf("test text: the edit changed tokens before the cut")
	}
	if shared != cut/bt {
		t.Errorf("prompts equal for %d tokens share %d blocks, want %d", cut, shared, cut/bt)
	}
	for i := shared; i < min(len(a.Blocks), len(b.Blocks)); i++ {
		if a.Blocks[i] == b.Blocks[i] {
			t.Errorf("block %d equal after the prompts differ", i)
		}
	}
	for _, id := range a.Blocks {
		if id < 0 {
			t.Errorf("block id %d < 0", id)
		}
	}
	// The same prompt split into messages (chat) has the same tokens when it splits on
	// token boundaries, and so the same blocks: blocks do not see messages.
	chat := mustParse(t, p, "/v1/chat/completions", chatBody("u", enc.Decode(ids[:100]), "u", enc.Decode(ids[100:])))
	if !reflect.DeepEqual(chat.Blocks, a.Blocks) {
		t.Errorf("the prompt in two messages: blocks %v, want %v", chat.Blocks, a.Blocks)
	}
	// Token-id prompts that differ in their first token only: every block differs, as
	// each id chains over the blocks before it.
	seq := make([]string, 64)
	for i := range seq {
		seq[i] = fmt.Sprint(100 + i)
	}
	x := mustParse(t, p, "/v1/completions", `{"prompt":[`+strings.Join(seq, ",")+`]}`)
	seq[0] = "99"
	y := mustParse(t, p, "/v1/completions", `{"prompt":[`+strings.Join(seq, ",")+`]}`)
	if len(x.Blocks) != 4 || len(y.Blocks) != 4 {
		t.Fatalf("64 token ids: %d and %d blocks, want 4", len(x.Blocks), len(y.Blocks))
	}
	for i := range x.Blocks {
		if x.Blocks[i] == y.Blocks[i] {
			t.Errorf("prompts differing in their first token share block %d", i)
		}
	}
	// Another salt, other ids.
	q, _ := NewParser(ParserOptions{Salt: [32]byte{7}, Encoding: enc, BlockTokens: bt})
	if c := mustParse(t, q, "/v1/completions", fmt.Sprintf(`{"prompt":%q}`, text)); c.Blocks[0] == a.Blocks[0] {
		t.Errorf("two salts give the same block id")
	}
	for _, c := range []struct{ path, body, why string }{
		{"/v1/embeddings", fmt.Sprintf(`{"input":%q}`, text), "embeddings"},
		{"/v1/completions", fmt.Sprintf(`{"prompt":[%q,%q]}`, text, text), "a batch of prompts"},
		{"/v1/responses", fmt.Sprintf(`{"previous_response_id":"r1","input":%q}`, text), "previous_response_id"},
		{"/v1/completions", `{"prompt":"short"}`, "fewer tokens than a block"},
	} {
		if r := mustParse(t, p, c.path, c.body); r.Blocks != nil || r.PromptTokens == 0 {
			t.Errorf("%s: Blocks %v PromptTokens %d, want none and tokens counted", c.why, r.Blocks, r.PromptTokens)
		}
	}
	if r := mustParse(t, testParser(t, 0, 0), "/v1/completions", fmt.Sprintf(`{"prompt":%q}`, text)); r.Blocks != nil {
		t.Errorf("BlockTokens 0: blocks %v", r.Blocks)
	}
}

func TestNewParserErrors(t *testing.T) {
	enc, _ := tokenize.Get(tokenize.CL100kBase)
	for _, o := range []ParserOptions{{}, {Encoding: enc, BlockTokens: -1}} {
		if _, err := NewParser(o); err == nil {
			t.Errorf("NewParser(%+v): no error", o)
		}
	}
}

// TestParseErrors: a body that is not what its API takes gives an error naming the
// field, and quoting nothing of the body.
func TestParseErrors(t *testing.T) {
	p := testParser(t, 16, 0)
	const mark = "Zq9xMARKERq7"
	for _, c := range []struct{ path, body, field string }{
		{"/v1/chat/completions", `{"messages":[` + mark, "body: not valid JSON"},
		{"/v1/chat/completions", mark, "body: not valid JSON"},
		{"/v1/chat/completions", `{"model":1234567,"x":"` + mark + `"}`, "model: want a string, got number"},
		{"/v1/chat/completions", `{"stream":"` + mark + `"}`, "stream: want a boolean, got string"},
		{"/v1/chat/completions", `{"max_tokens":-5,"x":"` + mark + `"}`, "max_tokens: not an integer"},
		{"/v1/chat/completions", `{"max_completion_tokens":1e12}`, "max_completion_tokens: not an integer"},
		{"/v1/chat/completions", `{"n":1.5}`, "n: not an integer"},
		{"/v1/chat/completions", `{"max_tokens":"` + mark + `"}`, "max_tokens: want a number, got a string"},
		{"/v1/chat/completions", `{"messages":"` + mark + `"}`, "messages: want an array of messages, got a string"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":` + "12345" + `}]}`, "messages[0].content: want a string or an array of content parts, got a number"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":["` + mark + `"]}]}`, "messages[0].content[0]: want a content part (an object), got a string"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"text","text":7}]}]}`, "messages[0].content[0].text: want a string, got number"},
		{"/v1/chat/completions", `{"messages":[{"role":5}]}`, "messages[0].role: want a string, got number"},
		{"/v1/chat/completions", `{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":["` + mark + `"]}}]}]}`, "messages[0].tool_calls.function.name: want a string, got array"},
		{"/v1/messages", `{"metadata":{"user_id":99}}`, "metadata.user_id: want a string, got number"},
		{"/v1/messages", `{"messages":[{"role":"user","content":[{"type":"tool_result","content":3}]}]}`, "messages[0].content[0].content: want a string or an array"},
		{"/v1/responses", `{"input":42}`, "input: want a string or an array of input items, got a number"},
		{"/v1/responses", `{"input":[{"type":"function_call","name":{"x":"` + mark + `"}}]}`, "input[0].name: want a string, got object"},
		{"/v1/completions", `{"prompt":[1,-2]}`, "prompt[1]: not a token id"},
		{"/v1/completions", `{"prompt":[1,12345678901234567890123]}`, "prompt: want a number, got number"},
		{"/v1/completions", `{"prompt":[1,"` + mark + `"]}`, "prompt: want a number, got string"},
		{"/v1/completions", `{"prompt":["a",{"x":"` + mark + `"}]}`, "prompt[1]: want a string or an array of token ids, got an object"},
		{"/v1/embeddings", `{"input":true}`, "input: want a string, an array of token ids"},
		{"/v1/rerank", `{"query":"q","documents":[1]}`, "documents[0]: want a string or an object, got a number"},
	} {
		r, err := p.Parse(c.path, []byte(c.body))
		if err == nil {
			t.Errorf("%s %s: no error", c.path, c.body)
			continue
		}
		if !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s %s: error %q, want it to say %q", c.path, c.body, err, c.field)
		}
		if strings.Contains(err.Error(), "MARKER") || strings.Contains(err.Error(), "12345") || strings.Contains(err.Error(), "-5") || strings.Contains(err.Error(), "1.5") {
			t.Errorf("%s %s: error %q quotes the body", c.path, c.body, err)
		}
		if !reflect.DeepEqual(r, Request{}) {
			t.Errorf("%s %s: an error with a Request %+v", c.path, c.body, r)
		}
	}
}

// TestParseLenient: what a body may hold that the recording does not read is accepted:
// part types it does not know, whose fields are of other kinds than known types' fields.
func TestParseLenient(t *testing.T) {
	p := testParser(t, 16, 0)
	r := mustParse(t, p, "/v1/messages", `{"messages":[{"role":"user","content":[{"type":"document","text":{"x":1},"source":{"type":"text","data":"d"}},{"type":"text","text":"hi"}]}]}`)
	if string(r.Roles) != "u" || r.PromptTokens != 1 {
		t.Errorf("unknown part type: roles %q tokens %d", r.Roles, r.PromptTokens)
	}
}

// TestPrivacy: a body whose every string holds a marker gives a Request that holds no
// byte of it, and so does an error about such a body.
func TestPrivacy(t *testing.T) {
	p := testParser(t, 4, 0)
	const mark = "PRIVATEmarker8231"
	m := func(s string) string { return s + " " + mark + " " + mark }
	bodies := map[string]string{
		"/v1/chat/completions": fmt.Sprintf(`{"model":"m","user":%q,"tools":[{"type":"function","function":{"name":%q}}],"messages":[{"role":"system","content":%q},{"role":"user","content":[{"type":"text","text":%q},{"type":"image_url","image_url":{"url":%q}}]},{"role":"assistant","tool_calls":[{"id":%q,"function":{"name":%q,"arguments":%q}}]},{"role":"tool","tool_call_id":%q,"content":%q}]}`,
			m("u"), m("t"), m("s"), m("x"), m("data:"), m("c"), m("f"), m("{}"), m("c"), m("r")),
		"/v1/messages": fmt.Sprintf(`{"model":"m","metadata":{"user_id":%q},"system":%q,"messages":[{"role":"user","content":[{"type":"text","text":%q},{"type":"tool_result","tool_use_id":%q,"content":%q}]},{"role":"assistant","content":[{"type":"thinking","thinking":%q},{"type":"tool_use","id":"t","name":%q,"input":{"k":%q}}]}]}`,
			m("u"), m("s"), m("x"), m("id"), m("res"), m("th"), m("n"), m("v")),
		"/v1/responses": fmt.Sprintf(`{"model":"m","previous_response_id":%q,"instructions":%q,"input":[{"role":"user","content":%q},{"type":"function_call_output","call_id":%q,"output":%q}]}`,
			m("p"), m("i"), m("x"), m("c"), m("o")),
		"/v1/completions": fmt.Sprintf(`{"model":"m","prompt":%q}`, m("x")),
		"/v1/embeddings":  fmt.Sprintf(`{"model":"m","input":[%q]}`, m("x")),
		"/v1/rerank":      fmt.Sprintf(`{"model":"m","query":%q,"documents":[%q]}`, m("q"), m("d")),
	}
	for path, body := range bodies {
		r := mustParse(t, p, path, body)
		if s := fmt.Sprintf("%#v", r); strings.Contains(s, "PRIVATE") || strings.Contains(s, "marker") {
			t.Errorf("%s: the Request holds the marker: %s", path, s)
		}
		if len(r.Msgs) == 0 {
			t.Errorf("%s: no messages parsed", path)
		}
		// An error about the same body, broken after the marker.
		if _, err := p.Parse(path, []byte(body[:len(body)-2])); err == nil || strings.Contains(err.Error(), "PRIVATE") || strings.Contains(err.Error(), "marker") {
			t.Errorf("%s: a truncated body's error %v", path, err)
		}
	}
}

// TestTokenCache: an agent's growing context, each call resending the earlier calls'
// messages, is tokenized once per message; the cache holds at most its bound.
func TestTokenCache(t *testing.T) {
	p := testParser(t, 16, 1<<20)
	var rc []string
	for call := range 20 {
		rc = append(rc, "u", words(call*50, 40), "a", words(call*50+40, 10))
		if r := mustParse(t, p, "/v1/chat/completions", chatBody(rc...)); r.PromptTokens == 0 {
			t.Fatal("no tokens")
		}
	}
	if misses := p.cache.encodes.Load(); misses != int64(len(rc)/2) {
		t.Errorf("20 calls of a growing context: %d messages tokenized, want each of the %d once", misses, len(rc)/2)
	}
	// A cache of 100 tokens keeps its bound; the results are those without a cache.
	small := testParser(t, 16, 100)
	none := testParser(t, 16, -1)
	for range 3 {
		a := mustParse(t, small, "/v1/chat/completions", chatBody(rc...))
		b := mustParse(t, none, "/v1/chat/completions", chatBody(rc...))
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("a small cache changes the result")
		}
		if _, tokens := small.cache.stats(); tokens > 100 {
			t.Fatalf("cache of 100 tokens holds %d", tokens)
		}
	}
	if n, _ := none.cache.stats(); n != 0 {
		t.Errorf("CacheTokens -1 caches %d entries", n)
	}
}

func TestTokenCacheLRU(t *testing.T) {
	c := newTokenCache(10)
	c.put(1, make([]uint32, 4))
	c.put(2, make([]uint32, 4))
	c.get(1) // 2 is now the least recently used
	c.put(3, make([]uint32, 4))
	if _, ok := c.get(2); ok {
		t.Errorf("the least recently used entry was kept")
	}
	if _, ok := c.get(1); !ok {
		t.Errorf("a recently used entry was evicted")
	}
	c.put(4, make([]uint32, 11))
	if _, ok := c.get(4); ok {
		t.Errorf("an entry larger than the cache was cached")
	}
	if n, tokens := c.stats(); n != 2 || tokens != 8 {
		t.Errorf("cache holds %d entries, %d tokens; want 2, 8", n, tokens)
	}
}

// TestParseConcurrent: parsers sharing a cache give each request what one alone does.
func TestParseConcurrent(t *testing.T) {
	p := testParser(t, 8, 500)
	var bodies []string
	var rc []string
	for i := range 30 {
		rc = append(rc, "u", words(i*7, 20), "a", words(i*7+3, 5))
		bodies = append(bodies, chatBody(rc...))
	}
	want := make([]Request, len(bodies))
	ref := testParser(t, 8, -1)
	for i, b := range bodies {
		want[i] = mustParse(t, ref, "/v1/chat/completions", b)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8*len(bodies))
	for g := range 8 {
		wg.Go(func() {
			for i := range bodies {
				j := (i + g*5) % len(bodies)
				r, err := p.Parse("/v1/chat/completions", []byte(bodies[j]))
				if err != nil || !reflect.DeepEqual(r, want[j]) {
					errs <- fmt.Sprintf("body %d: %v", j, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestErrorWords: what an error may repeat of encoding/json's: the kind of a value, and
// a field path made of struct tags, nothing else.
func TestErrorWords(t *testing.T) {
	for v, want := range map[string]string{"number 123456": "number", "string": "string", "array": "array", "secret words": "another kind of value"} {
		if got := valueKind(v); got != want {
			t.Errorf("valueKind(%q) = %q, want %q", v, got, want)
		}
	}
	for f, want := range map[string]bool{"messages.content": true, "tool_calls.function.name": true, "": true,
		"metadata.Secret": false, "x y": false, "a\"b": false, strings.Repeat("a", 65): false} {
		if got := safeField(f); got != want {
			t.Errorf("safeField(%q) = %v, want %v", f, got, want)
		}
	}
}

func TestCount(t *testing.T) {
	for s, want := range map[string]int32{"0": 0, "7": 7, "7.0": 7, "2147483647": math.MaxInt32, "1e2": 100} {
		if got, err := count(wire.APIChat, "n", json.RawMessage(s)); err != nil || got != want {
			t.Errorf("count(%s) = %d, %v; want %d", s, got, err, want)
		}
	}
	if got, err := count(wire.APIChat, "n", json.RawMessage("null")); err != nil || got != 0 {
		t.Errorf("count(null) = %d, %v; want 0", got, err)
	}
	for _, s := range []string{"-1", "2147483648", "1.5", "1e300", `"7"`, "true", "[1]"} {
		if _, err := count(wire.APIChat, "n", json.RawMessage(s)); err == nil {
			t.Errorf("count(%s): no error", s)
		}
	}
}

// FuzzParse: any body, to any API's path, parses or gives an error that quotes none of
// it; a body that parses hashes the same when parsed again.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		chatBody("s", "S", "u", "hi", "a", "yo", "u", "more"),
		`{"messages":[{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f","arguments":"{\"a\":[1,2]}"}}]},{"role":"tool","content":[{"type":"text","text":"x"}]}]}`,
		`{"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"tool_result","content":[{"type":"image","source":{"data":"x"}}]}]}]}`,
		`{"input":[{"type":"function_call","arguments":"{}"},{"type":"function_call_output","output":"o"},{"type":"x_call"}]}`,
		`{"prompt":[[1,2],[3]],"input":["a",[1]],"query":"q","documents":[{"text":"t"}]}`,
		`{"max_tokens":1e3,"n":2.0,"stream":true,"tools":[{"b":1,"a":[]}]}`,
	} {
		for _, path := range []string{"/v1/chat/completions", "/v1/messages", "/v1/responses", "/v1/completions", "/v1/embeddings", "/v1/rerank"} {
			f.Add(path, []byte(s))
		}
	}
	p := testParser(f, 4, 1000)
	f.Fuzz(func(t *testing.T, path string, body []byte) {
		r, err := p.Parse(path, body)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "record: ") {
				t.Fatalf("error %q does not say where it comes from", err)
			}
			// Whatever the error says is ours: no 8-letter run of the
			// body that is not also in the messages' fixed words (checked loosely:
			// a run of the body's letters).
			msg := err.Error()
			for i := 0; i+8 <= len(body); i++ {
				w := body[i : i+8]
				if isLetters(w) && strings.Contains(msg, string(w)) && !strings.Contains(fixedWords, string(w)) {
					t.Fatalf("error %q quotes the body %q", msg, w)
				}
			}
			return
		}
		again, _ := p.Parse(path, body)
		if !reflect.DeepEqual(r, again) {
			t.Fatalf("two parses differ: %+v and %+v", r, again)
		}
		if len(r.Msgs) != len(r.Roles) || r.PromptTokens < r.ToolTokens || len(r.Blocks) > int(r.PromptTokens)/4 {
			t.Fatalf("inconsistent request %+v", r)
		}
	})
}

// fixedWords are the words the parser's errors are made of (field names, kinds).
const fixedWords = "record: request body: not valid JSON want a string got number boolean array object " +
	"an of content parts messages input items token ids documents query prompt content part " +
	"integer in another kind value function_call tool_calls system metadata user_id model stream " +
	"max_tokens max_completion_tokens max_output_tokens image_url arguments output refusal " +
	"text role name tool_call_id source safety_identifier previous_response_id instructions " +
	"completions chat messages responses embeddings rerank nothing null custom call_id input"

func isLetters(b []byte) bool {
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// TestParseCounted: given the server's count, messages are tokenized only for what needs
// their tokens (the blocks of a prompt holding a whole block); the hashes, the scalars and
// the tools' count are Parse's either way.
func TestParseCounted(t *testing.T) {
	body := `{"model":"m","max_tokens":7,"tools":[{"type":"function","function":{"name":"f"}}],"messages":[` +
		`{"role":"system","content":"` + words(0, 40) + `"},{"role":"user","content":"` + words(100, 40) + `"}]}`
	for _, c := range []struct {
		name         string
		blockTokens  int
		serverPrompt int32
		tokenized    bool
	}{
		{"no blocks, server counted", 0, 90, false},
		{"no blocks, server said none", 0, 0, true},
		{"blocks, prompt holds one", 16, 90, true},
		{"blocks, prompt shorter than one", 64, 63, false},
		{"blocks, server said none", 64, 0, true},
	} {
		p := testParser(t, c.blockTokens, 0)
		want := mustParse(t, testParser(t, c.blockTokens, 0), "/v1/chat/completions", body)
		got, err := p.ParseCounted("/v1/chat/completions", []byte(body), c.serverPrompt)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		// The tools are one tokenized text, each message another.
		if n := p.cache.encodes.Load(); c.tokenized != (n == 3) || !c.tokenized && n != 1 {
			t.Errorf("%s: %d texts tokenized, want the tools' and the messages' = %v", c.name, n, c.tokenized)
		}
		if !c.tokenized {
			if got.PromptTokens != 0 || got.Blocks != nil {
				t.Errorf("%s: PromptTokens %d Blocks %v, want neither counted", c.name, got.PromptTokens, got.Blocks)
			}
			want.PromptTokens, want.Blocks = 0, nil
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, want)
		}
	}
}
