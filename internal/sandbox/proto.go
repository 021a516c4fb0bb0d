package sandbox

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/agentfleet/agentfleet"
)

// The parent and a child speak a compact framed protocol over two pipes
// (the child's fd 3 for requests, fd 4 for replies). A frame is
//
//	[4-byte big-endian payload length][1-byte type][payload]
//
// and a payload is a sequence of uvarints and length-prefixed byte strings
// in a fixed order per frame type. It is written with one write per frame
// and read into a reused buffer, so a whole turn costs two writes and two
// reads on the happy path. JSON appears only where the value is JSON
// anyway (args, return, host-call arguments and replies).

const (
	protoVersion = 4

	frameHello    byte = 'h' // child -> parent: ready (version, pid, CPU time, confinement)
	frameExec     byte = 'x' // parent -> child: run a turn
	frameCancel   byte = 'c' // parent -> child: stop the turn (seq, reason)
	frameHostCall byte = 'q' // child -> parent: run a host primitive
	frameHostRep  byte = 'r' // parent -> child: host primitive's outcome
	frameResult   byte = 'd' // child -> parent: the turn's outcome

	frameHeaderLen = 5
)

// Host-call reply statuses.
const (
	hostOK     byte = 0 // data is the JSON result
	hostError  byte = 1 // data is an error message; an ordinary JS Error
	hostDenied byte = 2 // data is an error message; a policy denial
	hostPark   byte = 3 // no data; the call waits for an approval: stop the turn
)

// errProtocol marks a malformed frame: the peer is not speaking our
// protocol (or is corrupt) and must be discarded.
var errProtocol = errors.New("sandbox protocol error")

// kindCodes maps script error kinds to their wire byte; 0 is "no error".
var kindCodes = [...]agentfleet.ScriptErrorKind{
	1: agentfleet.ScriptException,
	2: agentfleet.ScriptSyntax,
	3: agentfleet.ScriptTimeout,
	4: agentfleet.ScriptMemory,
	5: agentfleet.ScriptLimit,
	6: agentfleet.ScriptCancelled,
	7: agentfleet.ScriptDenied,
}

func kindCode(k agentfleet.ScriptErrorKind) byte {
	for i, kk := range kindCodes {
		if kk == k && i > 0 {
			return byte(i)
		}
	}
	return 1
}

func kindFromCode(c byte) agentfleet.ScriptErrorKind {
	if int(c) < len(kindCodes) && c > 0 {
		return kindCodes[c]
	}
	return agentfleet.ScriptException
}

// encoder builds one frame in a reusable buffer.
type encoder struct{ b []byte }

func (e *encoder) start(typ byte) {
	e.b = append(e.b[:0], 0, 0, 0, 0, typ)
}

func (e *encoder) uint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }

func (e *encoder) byte(v byte) { e.b = append(e.b, v) }

func (e *encoder) str(s string) {
	e.b = binary.AppendUvarint(e.b, uint64(len(s)))
	e.b = append(e.b, s...)
}

func (e *encoder) bytes(p []byte) {
	e.b = binary.AppendUvarint(e.b, uint64(len(p)))
	e.b = append(e.b, p...)
}

// frame patches the length and returns the frame ready to write.
func (e *encoder) frame() []byte {
	binary.BigEndian.PutUint32(e.b[:4], uint32(len(e.b)-frameHeaderLen))
	return e.b
}

// decoder reads fields from one payload; the first malformed field sets
// err and every later read returns zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated %s", errProtocol, what)
	}
	d.b = nil
}

func (d *decoder) uint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail("byte")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

// bytes returns a sub-slice of the payload: valid only until the next
// frame is read into the same buffer.
func (d *decoder) bytes() []byte {
	n := d.uint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail("bytes")
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string { return string(d.bytes()) }

// readFrame reads one frame into buf (grown as needed) and returns its
// type and payload, which aliases buf.
func readFrame(r *bufio.Reader, buf *[]byte, max int) (byte, []byte, error) {
	var hdr [frameHeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:4]))
	if n > max {
		return 0, nil, fmt.Errorf("%w: frame of %d bytes exceeds %d", errProtocol, n, max)
	}
	if cap(*buf) < n {
		*buf = make([]byte, n)
	}
	p := (*buf)[:n]
	if _, err := io.ReadFull(r, p); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return hdr[4], p, nil
}

// execMsg is the decoded exec frame.
type execMsg struct {
	seq    uint64
	prims  primSet
	script string
	// args is the carried value, JSON. Decoded, it aliases the frame:
	// it is valid only until the next frame is read.
	args []byte
	// tools is the turn's OpenAPI modules as the child defines them
	// (moduleTable); empty for an agent without any.
	tools string
}

func encodeExec(e *encoder, m *execMsg) []byte {
	e.start(frameExec)
	e.uint(m.seq)
	e.uint(uint64(m.prims))
	e.str(m.script)
	e.bytes(m.args)
	e.str(m.tools)
	return e.frame()
}

func decodeExec(p []byte) (execMsg, error) {
	d := decoder{b: p}
	m := execMsg{seq: d.uint(), prims: primSet(d.uint()), script: d.str()}
	m.args = d.bytes()
	m.tools = d.str()
	return m, d.err
}

// resultMsg is the decoded result frame.
type resultMsg struct {
	seq      uint64
	answered bool
	answer   []byte
	ret      []byte
	// The log as logBuffer.parts gives it: the parent redacts and joins.
	logHead, logTail string
	logCut           int64
	errKind          byte // 0: no error
	errMsg           string
	errCut           int // bytes cut from the end of errMsg (clipMessage)
	// cpu is the process's CPU time when it sent the result: where the
	// parent's count of the next turn's CPU time starts.
	cpu time.Duration
}

func encodeResult(e *encoder, m *resultMsg) []byte {
	e.start(frameResult)
	e.uint(m.seq)
	if m.answered {
		e.byte(1)
	} else {
		e.byte(0)
	}
	e.bytes(m.answer)
	e.bytes(m.ret)
	e.str(m.logHead)
	e.str(m.logTail)
	e.uint(uint64(m.logCut))
	e.byte(m.errKind)
	e.str(m.errMsg)
	e.uint(uint64(m.errCut))
	e.uint(uint64(m.cpu))
	return e.frame()
}

// decodeResult copies everything it keeps out of p.
func decodeResult(p []byte) (resultMsg, error) {
	d := decoder{b: p}
	var m resultMsg
	m.seq = d.uint()
	m.answered = d.byte() == 1
	if a := d.bytes(); len(a) > 0 {
		m.answer = append([]byte(nil), a...)
	}
	if r := d.bytes(); len(r) > 0 {
		m.ret = append([]byte(nil), r...)
	}
	m.logHead = d.str()
	m.logTail = d.str()
	m.logCut = int64(d.uint())
	m.errKind = d.byte()
	m.errMsg = d.str()
	m.errCut = int(d.uint())
	m.cpu = time.Duration(d.uint())
	return m, d.err
}
