package store_test

const crashChildEnv = "KILN_STORE_CRASH_CHILD"

func crashChild() int { return 0 }
