package forge

import (
	"container/list"
	"sync"
)

// sizedLRU is a map bounded by the total size of its values, dropping the
// least recently used entry first. It is safe for concurrent use.
type sizedLRU[K comparable, V any] struct {
	max int64

	mu    sync.Mutex
	size  int64
	items map[K]*list.Element // of *lruItem[K, V]
	lru   *list.List
}

type lruItem[K comparable, V any] struct {
	key  K
	val  V
	size int64
}

func newSizedLRU[K comparable, V any](max int64) *sizedLRU[K, V] {
	return &sizedLRU[K, V]{max: max, items: map[K]*list.Element{}, lru: list.New()}
}

// get returns k's value and marks it recently used.
func (c *sizedLRU[K, V]) get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[k]
	if !ok {
		var zero V
		return zero, false
	}
	c.lru.MoveToFront(el)
	return el.Value.(*lruItem[K, V]).val, true
}

// put stores v under k unless k is already there or v alone is larger
// than the whole budget, then drops old entries until the budget holds.
func (c *sizedLRU[K, V]) put(k K, v V, size int64) {
	if size > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.items[k]; ok {
		return
	}
	c.items[k] = c.lru.PushFront(&lruItem[K, V]{key: k, val: v, size: size})
	c.size += size
	for c.size > c.max {
		old := c.lru.Remove(c.lru.Back()).(*lruItem[K, V])
		delete(c.items, old.key)
		c.size -= old.size
	}
}
