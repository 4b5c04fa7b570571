package stampconn

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// TestConnStampsReads: a connection from Listener is a *Conn whose LastRead is zero until
// a read returns bytes and then is when that read returned (after the bytes were sent);
// the kernel's arrival stamp, when there is one, is between the send and the read.
func TestConnStampsReads(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := 0
	l := Listener{Listener: ln, OnAccept: func(net.Conn) { accepted++ }}
	defer l.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	nc, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, ok := nc.(*Conn)
	if !ok || accepted != 1 {
		t.Fatalf("Accept gave %T, OnAccept called %d times; want *Conn, once", nc, accepted)
	}
	if c.Raw() == nil {
		t.Error("a TCP connection has no raw socket")
	}
	if read, arrive := c.LastRead(); !read.IsZero() || !arrive.IsZero() {
		t.Fatalf("LastRead before any read = %v, %v; want zero", read, arrive)
	}
	sent := time.Now()
	if _, err := io.WriteString(client, "hello"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("read %q, %v", buf, err)
	}
	got := time.Now()
	read, arrive := c.LastRead()
	if read.Before(sent) || read.After(got) {
		t.Errorf("LastRead %v: not between the send %v and the read's return %v", read, sent, got)
	}
	if !arrive.IsZero() && (arrive.Before(sent) || arrive.After(read)) {
		t.Errorf("arrival %v: not between the send %v and the read %v", arrive, sent, read)
	}
}

// TestContext: ConnContext carries a *Conn to FromContext and nothing else.
func TestContext(t *testing.T) {
	c := &Conn{}
	if got := FromContext(ConnContext(context.Background(), c)); got != c {
		t.Errorf("FromContext(ConnContext(c)) = %p, want %p", got, c)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := FromContext(ConnContext(context.Background(), a)); got != nil {
		t.Errorf("FromContext of a plain conn's context = %p, want nil", got)
	}
	if got := FromContext(context.Background()); got != nil {
		t.Errorf("FromContext(Background) = %p, want nil", got)
	}
}
