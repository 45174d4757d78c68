//! The device cookie: a random id ([`aperture_core::sign_in::device`]) a browser keeps for 30
//! days after it signs in, so that its later sign-ins at the same account are not delayed by
//! other people's failures there.
//!
//! The cookie is `__Host-aperture_device` (`Secure`) when served over TLS and `aperture_device`
//! otherwise, like the session cookie; `HttpOnly`, `SameSite=Lax`, `Path=/`. The server keeps
//! only the SHA-256 of the id.

use axum::http::HeaderMap;
use tower_sessions::cookie::{Cookie, SameSite};

use aperture_core::sign_in::device::{KNOWN_FOR_MS, well_formed};

/// The cookie's name: `__Host-` prefixed when the cookies are `Secure`.
pub fn cookie_name(secure: bool) -> &'static str {
    if secure {
        "__Host-aperture_device"
    } else {
        "aperture_device"
    }
}

/// The well-formed device id in a request's cookies, if any.
pub fn from_headers(headers: &HeaderMap, secure: bool) -> Option<String> {
    let name = cookie_name(secure);
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|line| line.to_str().ok())
        .flat_map(Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == name)
        .map(|c| c.value().to_owned())
        .filter(|id| well_formed(id))
}

/// The `Set-Cookie` value that (re)sets the cookie to `id` for another [`KNOWN_FOR_MS`].
pub fn set_cookie(id: &str, secure: bool) -> String {
    Cookie::build((cookie_name(secure), id.to_owned()))
        .path("/")
        .secure(secure)
        .http_only(true)
        .same_site(SameSite::Lax)
        .max_age(time::Duration::milliseconds(KNOWN_FOR_MS))
        .build()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use aperture_core::sign_in::device::{hash, new_id};

    #[test]
    fn ids_are_read_back_only_under_the_right_name_and_shape() {
        let id = new_id();
        assert_ne!(id, new_id());
        assert_eq!(hash(&id).len(), 64);
        let headers = |line: &str| {
            let mut h = HeaderMap::new();
            h.insert(axum::http::header::COOKIE, line.parse().unwrap());
            h
        };
        let plain = headers(&format!("aperture_session=x; aperture_device={id}"));
        assert_eq!(from_headers(&plain, false), Some(id.clone()));
        assert_eq!(
            from_headers(&plain, true),
            None,
            "TLS reads the __Host- name"
        );
        let tls = headers(&format!("__Host-aperture_device={id}"));
        assert_eq!(from_headers(&tls, true), Some(id.clone()));
        for bad in [
            "aperture_device=short",
            "aperture_device=",
            "aperture_device=!!!",
        ] {
            assert_eq!(from_headers(&headers(bad), false), None, "{bad}");
        }
        let set = set_cookie(&id, true);
        for part in [
            "__Host-aperture_device=",
            "Path=/",
            "Secure",
            "HttpOnly",
            "SameSite=Lax",
            "Max-Age=2592000",
        ] {
            assert!(set.contains(part), "{part} in {set}");
        }
        assert!(!set_cookie(&id, false).contains("Secure"));
    }
}
