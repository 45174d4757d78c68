//! # `aperture-types`: what the server and the dashboard exchange
//!
//! The requests and views of the REST API and the dashboard's server functions, and the one
//! error shape they answer with — in a crate of their own, so the services below the HTTP
//! surface and the dashboard (also built for wasm) use the same types without depending on
//! each other.
//!
//! Modules by floor, ground floor first:
//! - [`error`]: [`error::AppError`], the one error shape of the dashboard and the REST API.
//! - [`dto`]: requests and views exchanged with the server (never database rows).
//!
//! Feature `server-fn`: `AppError` is the error type of Leptos server functions.

pub mod dto;
pub mod error;
