//! The module graph: its cycles (strongly connected components of more than one module) and,
//! when it has none, its floors.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::source::Edge;

/// Modules that reach each other, with the edges between them.
#[derive(Debug)]
pub struct Cycle {
    pub modules: Vec<String>,
    pub edges: Vec<Edge>,
}

impl fmt::Display for Cycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "cycle of {} modules: {}",
            self.modules.len(),
            self.modules.join(", ")
        )?;
        for edge in &self.edges {
            writeln!(f, "  {edge}")?;
        }
        Ok(())
    }
}

fn adjacency<'a>(modules: &'a [String], edges: &[Edge]) -> BTreeMap<&'a str, BTreeSet<&'a str>> {
    let mut next: BTreeMap<&str, BTreeSet<&str>> = modules
        .iter()
        .map(|m| (m.as_str(), BTreeSet::new()))
        .collect();
    for edge in edges {
        let from = modules.iter().find(|m| **m == edge.from);
        let to = modules.iter().find(|m| **m == edge.to);
        if let (Some(from), Some(to)) = (from, to) {
            next.entry(from.as_str()).or_default().insert(to.as_str());
        }
    }
    next
}

/// The strongly connected components of more than one module (Tarjan's algorithm), each with
/// the edges inside it, largest first.
pub fn cycles(modules: &[String], edges: &[Edge]) -> Vec<Cycle> {
    let next = adjacency(modules, edges);
    let mut tarjan = Tarjan {
        next: &next,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        counter: 0,
        components: Vec::new(),
    };
    for module in next.keys() {
        if !tarjan.index.contains_key(module) {
            tarjan.visit(module);
        }
    }
    let mut cycles: Vec<Cycle> = tarjan
        .components
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|mut component| {
            component.sort();
            let inside: Vec<Edge> = edges
                .iter()
                .filter(|e| {
                    component.iter().any(|m| *m == e.from) && component.iter().any(|m| *m == e.to)
                })
                .cloned()
                .collect();
            Cycle {
                modules: component.into_iter().map(str::to_owned).collect(),
                edges: inside,
            }
        })
        .collect();
    cycles.sort_by_key(|c| std::cmp::Reverse(c.modules.len()));
    cycles
}

struct Tarjan<'g, 'a> {
    next: &'g BTreeMap<&'a str, BTreeSet<&'a str>>,
    index: BTreeMap<&'a str, usize>,
    low: BTreeMap<&'a str, usize>,
    stack: Vec<&'a str>,
    on_stack: BTreeSet<&'a str>,
    counter: usize,
    components: Vec<Vec<&'a str>>,
}

impl<'a> Tarjan<'_, 'a> {
    fn visit(&mut self, module: &'a str) {
        self.index.insert(module, self.counter);
        self.low.insert(module, self.counter);
        self.counter += 1;
        self.stack.push(module);
        self.on_stack.insert(module);
        let targets: Vec<&'a str> = self
            .next
            .get(module)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default();
        for target in targets {
            if !self.index.contains_key(target) {
                self.visit(target);
                let low = self.low[module].min(self.low[target]);
                self.low.insert(module, low);
            } else if self.on_stack.contains(target) {
                let low = self.low[module].min(self.index[target]);
                self.low.insert(module, low);
            }
        }
        if self.low[module] == self.index[module] {
            let mut component = Vec::new();
            while let Some(top) = self.stack.pop() {
                self.on_stack.remove(top);
                component.push(top);
                if top == module {
                    break;
                }
            }
            self.components.push(component);
        }
    }
}

/// The modules by floor, ground floor first: a module stands one floor above the highest
/// module it uses. `None` when the graph has a cycle.
pub fn floors(modules: &[String], edges: &[Edge]) -> Option<Vec<Vec<String>>> {
    if !cycles(modules, edges).is_empty() {
        return None;
    }
    let next = adjacency(modules, edges);
    let mut height: BTreeMap<&str, usize> = BTreeMap::new();
    fn climb<'a>(
        module: &'a str,
        next: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        height: &mut BTreeMap<&'a str, usize>,
    ) -> usize {
        if let Some(h) = height.get(module) {
            return *h;
        }
        let h = next
            .get(module)
            .map(|targets| {
                targets
                    .iter()
                    .map(|t| climb(t, next, height) + 1)
                    .max()
                    .unwrap_or(0)
            })
            .unwrap_or(0);
        height.insert(module, h);
        h
    }
    for module in next.keys() {
        climb(module, &next, &mut height);
    }
    let top = height.values().copied().max().unwrap_or(0);
    let mut floors = vec![Vec::new(); top + 1];
    for (module, h) in height {
        floors[h].push(module.to_owned());
    }
    Some(floors)
}
