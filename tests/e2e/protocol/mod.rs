//! The client side of the protocol: malformed PDUs, controls, paged
//! results, pipelining and backpressure, connection state through real
//! clients, TLS on both sides, PROXY protocol in and out.

mod backpressure;
mod connection_state;
mod controls;
mod malformed;
mod paged_lost;
mod paged_results;
mod pipelining;
mod proxy_protocol;
mod send_proxy;
mod tls;
mod tls_both_sides;
