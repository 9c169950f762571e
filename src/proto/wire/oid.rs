//! Object identifiers more than one wire module names, in a module that
//! imports none of them (so that framing and the control readers do not
//! import each other for a constant).

/// The password policy request/response control (draft-behera-ldap-password-policy).
pub const OID_PPOLICY: &str = "1.3.6.1.4.1.42.2.27.8.5.1";
