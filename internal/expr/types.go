package expr

import (
	"maps"
	"slices"
	"strings"
)

// Type describes the shape of a value for the lint-time checker. The zero
// Type is Any. The scalar types (String, Number, Bool, Null, Any) compare
// equal with ==; composite types are compared by the checker structurally.
type Type struct{ t *typeInfo }

type typeKind int

const (
	kAny typeKind = iota
	kString
	kNumber
	kBool
	kNull
	kObject // closed: only the listed fields exist
	kMap    // open: any key, values of one type
	kArray
)

type typeInfo struct {
	kind   typeKind
	fields map[string]Type // kObject
	elem   Type            // kMap, kArray
}

// The scalar types. Any is an unknown type: the checker accepts anything on
// it and everything read from it is Any.
var (
	String = Type{&typeInfo{kind: kString}}
	Number = Type{&typeInfo{kind: kNumber}}
	Bool   = Type{&typeInfo{kind: kBool}}
	Null   = Type{&typeInfo{kind: kNull}}
	Any    = Type{}
)

// ObjectOf is a closed object: reading a field it does not list is a lint
// error naming the fields. The map is copied.
func ObjectOf(fields map[string]Type) Type {
	return Type{&typeInfo{kind: kObject, fields: maps.Clone(fields)}}
}

// MapOf is an open object: any key may be read and its values have type
// elem; a missing key is null at run time.
func MapOf(elem Type) Type { return Type{&typeInfo{kind: kMap, elem: elem}} }

// ArrayOf is an array whose elements have type elem.
func ArrayOf(elem Type) Type { return Type{&typeInfo{kind: kArray, elem: elem}} }

func (t Type) kind() typeKind {
	if t.t == nil {
		return kAny
	}
	return t.t.kind
}

// String names the type: "string", "object {a, b}", "map of string",
// "array of number", …
func (t Type) String() string {
	switch t.kind() {
	case kString:
		return "string"
	case kNumber:
		return "number"
	case kBool:
		return "bool"
	case kNull:
		return "null"
	case kObject:
		return "object {" + strings.Join(t.fieldNames(), ", ") + "}"
	case kMap:
		return "map of " + t.t.elem.String()
	case kArray:
		return "array of " + t.t.elem.String()
	}
	return "any"
}

// article names the type with its article for messages: "a string".
func (t Type) article() string {
	switch t.kind() {
	case kString:
		return "a string"
	case kNumber:
		return "a number"
	case kBool:
		return "a bool"
	case kNull:
		return "null"
	case kObject, kMap:
		return "an object"
	case kArray:
		return "an array"
	}
	return "a value of unknown type"
}

func (t Type) fieldNames() []string {
	return slices.Sorted(maps.Keys(t.t.fields))
}

func (t Type) isScalar() bool {
	k := t.kind()
	return k == kString || k == kNumber || k == kBool
}

// sameType reports structural equality.
func sameType(a, b Type) bool {
	if a.kind() != b.kind() {
		return false
	}
	switch a.kind() {
	case kMap, kArray:
		return sameType(a.t.elem, b.t.elem)
	case kObject:
		if len(a.t.fields) != len(b.t.fields) {
			return false
		}
		for k, v := range a.t.fields {
			w, ok := b.t.fields[k]
			if !ok || !sameType(v, w) {
				return false
			}
		}
	}
	return true
}
