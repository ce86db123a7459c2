// Package ingress turns what happens outside kiln into runs: webhook
// deliveries from GitHub, Gitea and generic senders, `kiln trigger` pushes
// to local repositories, and manual dispatches from the API.
//
// Every trigger becomes a delivery row first. The webhook handler answers
// 202 only after the row is committed; a processor then normalizes the
// event, reads the repository's workflows at the event's commit, matches
// them, and creates the runs in the same transaction that marks the delivery
// processed. So a delivery is processed exactly once even if the server dies
// right after answering: the row's short claim expires and the processor of
// the restarted server takes it over.
package ingress
