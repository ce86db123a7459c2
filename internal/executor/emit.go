package executor

import "sync"

// emitter hands a job's events to its Sink from one goroutine, in the order
// they were queued. The queue is bounded in bytes: push blocks while it is
// full, which is how a slow Sink slows the readers of a step's pipes (and
// then the step) instead of growing memory without limit.
type emitter struct {
	sink Sink
	max  int

	mu       sync.Mutex
	notEmpty sync.Cond
	notFull  sync.Cond
	queue    []emitItem
	bytes    int
	closed   bool
	done     chan struct{}
}

type emitItem struct {
	step  *StepEvent
	batch *LogBatch
	size  int
}

func newEmitter(sink Sink, maxBytes int) *emitter {
	em := &emitter{sink: sink, max: maxBytes, done: make(chan struct{})}
	em.notEmpty.L = &em.mu
	em.notFull.L = &em.mu
	go em.run()
	return em
}

func (em *emitter) step(ev StepEvent) {
	em.push(emitItem{step: &ev, size: 256})
}

func (em *emitter) logs(stepIndex int, lines []LogLine) {
	size := 0
	for i := range lines {
		size += len(lines[i].Text) + 64
	}
	em.push(emitItem{batch: &LogBatch{StepIndex: stepIndex, Lines: lines}, size: size})
}

func (em *emitter) push(it emitItem) {
	em.mu.Lock()
	defer em.mu.Unlock()
	// One item always fits, however large, so a huge batch cannot deadlock.
	for em.bytes > 0 && em.bytes+it.size > em.max && !em.closed {
		em.notFull.Wait()
	}
	if em.closed {
		return
	}
	em.queue = append(em.queue, it)
	em.bytes += it.size
	em.notEmpty.Signal()
}

func (em *emitter) run() {
	defer close(em.done)
	for {
		em.mu.Lock()
		for len(em.queue) == 0 && !em.closed {
			em.notEmpty.Wait()
		}
		if len(em.queue) == 0 {
			em.mu.Unlock()
			return
		}
		it := em.queue[0]
		em.queue[0] = emitItem{}
		em.queue = em.queue[1:]
		em.mu.Unlock()

		if it.step != nil {
			em.sink.Step(*it.step)
		} else {
			em.sink.Log(*it.batch)
		}

		em.mu.Lock()
		em.bytes -= it.size
		em.notFull.Broadcast()
		em.mu.Unlock()
	}
}

// close delivers everything queued, then stops. Later pushes are dropped.
func (em *emitter) close() {
	em.mu.Lock()
	em.closed = true
	em.notEmpty.Signal()
	em.notFull.Broadcast()
	em.mu.Unlock()
	<-em.done
}
