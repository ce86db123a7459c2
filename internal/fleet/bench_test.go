package fleet

const idleClientsEnv = "KILN_FLEET_IDLE_CLIENTS"

func idleClientsChild() int { return 0 }
