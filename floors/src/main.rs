//! `cargo run -p floors -- [--edges] <crate>/src…`: each crate's cycles, its floors and the
//! modules its tour leaves out (`--edges`: every edge too, with the path that makes it).

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut broken = false;
    let mut show_edges = false;
    for src in std::env::args().skip(1) {
        if src == "--edges" {
            show_edges = true;
            continue;
        }
        println!("# {src}");
        let krate = match floors::Crate::read(&src) {
            Ok(krate) => krate,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        };
        let edges = match krate.edges() {
            Ok(edges) => edges,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        };
        if show_edges {
            for edge in &edges {
                println!("{edge}");
            }
        }
        for cycle in floors::cycles(&krate.modules, &edges) {
            broken = true;
            print!("{cycle}");
        }
        if let Some(floors) = floors::floors(&krate.modules, &edges) {
            for (height, modules) in floors.iter().enumerate().rev() {
                println!("floor {height}: {}", modules.join(", "));
            }
        }
        let missing = floors::tour::missing(&krate);
        if !missing.is_empty() {
            broken = true;
            println!("not in the tour: {}", missing.join(", "));
        }
    }
    if broken {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
