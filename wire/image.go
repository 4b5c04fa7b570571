package wire

import (
	"bytes"
	"sync"
)

// Image is one image a request sends, as its bytes on the wire: MIME is its media type
// ("image/png", "image/jpeg") and Base64 the file in standard base64 (media.AppendBase64),
// made once per image and appended as it is into every body that sends it.
type Image struct {
	MIME   string
	Base64 []byte
}

// WithImages returns the encoder whose AppendBody sends its prompt as one user message
// holding the text and imgs (Kind.AppendUserMessage), through the kind's messages, tools
// included as WithTools says. It is a copy on the stack, like WithTools; nil or empty
// imgs, or a kind that takes no images (TakesImages false: completions), gives bodies
// without images, byte for byte those of e, so a caller checks TakesImages first.
// AppendMessagesBody and AppendContextBody take the conversation's messages as given: a
// caller that sends images in a conversation builds its user message with
// Kind.AppendUserMessage.
func (e Encoder) WithImages(imgs []Image) Encoder {
	e.images = imgs
	return e
}

// TakesImages reports whether the encoder's API takes images (Kind.AppendUserMessage).
func (e Encoder) TakesImages() bool { return e.kind.AppendUserMessage != nil }

// userMark stands for the user message while the kind's messages are appended around
// it: a NUL, which JSON never holds raw.
var userMark = []byte{0}

// textPool holds the buffers a prompt is escaped into before the kind's user message
// takes it (AppendUserMessage takes escaped text); a prompt is escaped once per body.
var textPool = sync.Pool{New: func() any { return new([]byte) }}

// appendImagePrompt appends the fields that carry prompt as one user message with the
// encoder's images and closes the body: the kind's messages around a mark, then the
// user message appended in the mark's place, so each image's bytes are appended once
// and never moved.
func (e Encoder) appendImagePrompt(b, prompt []byte) []byte {
	from := len(b)
	b = e.kind.AppendMessages(b, userMark)
	at := from + bytes.IndexByte(b[from:], 0)
	var tail [32]byte // what follows the messages: "]}" in every built-in kind
	n := copy(tail[:], b[at+1:])
	if n < len(b)-at-1 {
		panic("wire: a kind's messages close with more than 32 bytes")
	}
	b = b[:at]
	tp := textPool.Get().(*[]byte)
	text := AppendJSONContent((*tp)[:0], prompt)
	b = e.kind.AppendUserMessage(b, text, e.images)
	*tp = text[:0]
	textPool.Put(tp)
	return append(b, tail[:n]...)
}

// appendDataURL appends img as a data URL's content: "data:MIME;base64,DATA".
func appendDataURL(b []byte, img Image) []byte {
	b = append(b, "data:"...)
	b = AppendJSONContent(b, []byte(img.MIME))
	b = append(b, ";base64,"...)
	return append(b, img.Base64...)
}

// appendTextFirst appends a user message whose content is a text part (none when text
// is empty) opened by textOpen, then one part per image, its data URL between imageOpen
// and imageClose: the OpenAI shapes (chat's and the Responses API's), which differ only
// in their parts' names.
func appendTextFirst(b, text []byte, images []Image, textOpen, imageOpen, imageClose string) []byte {
	b = append(b, `{"role":"user","content":[`...)
	if len(text) > 0 {
		b = append(b, textOpen...)
		b = append(b, text...)
		b = append(b, `"}`...)
	}
	for i, img := range images {
		if i > 0 || len(text) > 0 {
			b = append(b, ',')
		}
		b = append(b, imageOpen...)
		b = appendDataURL(b, img)
		b = append(b, imageClose...)
	}
	return append(b, `]}`...)
}
