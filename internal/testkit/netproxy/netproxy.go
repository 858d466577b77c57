// Package netproxy is a TCP proxy for tests and the chaos suite that can
// partition the network between its clients and their server: a blackhole
// in both directions that closes nothing, so that neither side sees a
// reset or an end of stream, as when a switch drops every packet.
//
// While partitioned, the proxy reads nothing from either side, so what
// either side writes stays in its kernel's buffers and then blocks, and
// new connections are accepted (the client's SYN is answered, as a
// half-dead load balancer would) but not dialled through until the
// partition heals. Heal lets the bytes held back through, as TCP's
// retransmission would after a short partition. A side that gives up
// (a timeout, a keepalive) closes its own socket, and only then does the
// proxy close the other.
package netproxy

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
)

// Proxy forwards the connections it accepts on Addr to one target.
type Proxy struct {
	target string
	ln     net.Listener

	mu          sync.Mutex
	partitioned bool
	healed      chan struct{} // closed when a partition heals
	dropReply   []byte        // DropReplyTo's pattern, until a chunk matches
	afterDrop   func()        // DropReplyToThen's then, until a reply is lost
	conns       map[net.Conn]struct{}
	closed      bool
	wg          sync.WaitGroup
}

// Start listens on a free loopback port and forwards to target
// (host:port).
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, healed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.healed)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Partition starts a blackhole in both directions. It returns at once;
// bytes in flight in the proxy's own buffers (at most one read's worth a
// direction and connection) may still be delivered.
func (p *Proxy) Partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.partitioned {
		p.partitioned = true
		p.healed = make(chan struct{})
	}
}

// DropReplyTo arms the proxy to lose the reply to the next chunk a client
// sends that contains pattern (for Postgres, a simple-protocol COMMIT
// contains "commit"): the chunk reaches the server, the server's answer
// is read and thrown away, and then the connection is closed on both
// sides. The client sees its connection end with no answer, as when a
// reply is lost and the connection with it; the server has done what it
// was asked (it answered). It returns at once.
func (p *Proxy) DropReplyTo(pattern []byte) { p.DropReplyToThen(pattern, nil) }

// DropReplyToThen is DropReplyTo, and calls then once the reply is thrown
// away, before the connection is closed: what then does (a Partition, to
// hold the client's next try back) comes before the client can see the
// loss. then runs on the proxy's goroutine: it must not block.
func (p *Proxy) DropReplyToThen(pattern []byte, then func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropReply = bytes.Clone(pattern)
	p.afterDrop = then
}

// dropped runs DropReplyToThen's then, once.
func (p *Proxy) dropped() {
	p.mu.Lock()
	then := p.afterDrop
	p.afterDrop = nil
	p.mu.Unlock()
	if then != nil {
		then()
	}
}

// takeDrop reports whether chunk is the one whose reply is to be lost,
// disarming the proxy when it is.
func (p *Proxy) takeDrop(chunk []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dropReply == nil || !bytes.Contains(chunk, p.dropReply) {
		return false
	}
	p.dropReply = nil
	return true
}

// Heal ends a partition: what was held back flows again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.partitioned {
		p.partitioned = false
		close(p.healed)
	}
}

// Partitioned says whether the proxy is partitioned now.
func (p *Proxy) Partitioned() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.partitioned
}

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	if p.partitioned {
		p.partitioned = false
		close(p.healed)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

// gate blocks while the proxy is partitioned; false once it is closed.
func (p *Proxy) gate() bool {
	p.mu.Lock()
	healed, closed := p.healed, p.closed
	p.mu.Unlock()
	if closed {
		return false
	}
	<-healed
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	if !p.gate() {
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	done := make(chan struct{}, 2)
	var drop atomic.Bool // the server's next reply is lost (DropReplyTo)
	go func() { p.pipe(server, client, &drop, true); done <- struct{}{} }()
	go func() { p.pipe(client, server, &drop, false); done <- struct{}{} }()
	// The first side to end its stream or fail ends both, as a proxy that
	// passes a close through (after a partition heals: see pipe).
	<-done
	_ = client.Close()
	_ = server.Close()
	<-done
}

// pipe copies from src to dst, holding each read back while the proxy is
// partitioned. An end of stream or an error is held back the same way: a
// side that closes during a partition is not seen to close by the other
// until it heals. toServer says which way it copies: a chunk to the
// server may arm drop (DropReplyTo), and the next chunk from the server
// is then thrown away and the connection ended.
func (p *Proxy) pipe(dst, src net.Conn, drop *atomic.Bool, toServer bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if !p.gate() {
			return
		}
		if n > 0 && !toServer && drop.Load() {
			p.dropped()
			return // the reply is lost, and the connection with it
		}
		if n > 0 && toServer && p.takeDrop(buf[:n]) {
			drop.Store(true)
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
