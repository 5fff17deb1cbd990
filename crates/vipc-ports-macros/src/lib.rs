//! `#[interface]`: from a trait, a client stub whose methods look like the
//! trait's (returning `vipc_ports::Result<T>`) and a server dispatcher that
//! runs an implementation of the trait. Both carry a fingerprint — a hash
//! of the interface's name, its `version` and every method's signature — so
//! a client and server built from different versions fail with a clear
//! `Mismatch` error instead of decoding garbage.
//!
//! ```ignore
//! #[vipc_ports::interface(version = 2)]
//! pub trait KeyValue {
//!     fn get(&self, key: String) -> Option<Vec<u8>>;
//!     fn put(&self, key: String, value: Vec<u8>) -> bool;
//! }
//! // generates KeyValueClient<'p> (connect/at, get, put) and KeyValueServer<S: KeyValue + Send + Sync>.
//! ```

#![forbid(unsafe_code)]

use proc_macro::TokenStream;
use proc_macro2::TokenStream as Tokens;
use quote::{format_ident, quote};
use syn::{parse_macro_input, spanned::Spanned, FnArg, ItemTrait, Pat, ReturnType, TraitItem};

/// See the crate documentation.
#[proc_macro_attribute]
pub fn interface(attr: TokenStream, item: TokenStream) -> TokenStream {
    let version = match parse_version(attr.into()) {
        Ok(v) => v,
        Err(e) => return e.to_compile_error().into(),
    };
    let tr = parse_macro_input!(item as ItemTrait);
    match expand(&tr, version) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// `version = N` (default 1).
fn parse_version(attr: Tokens) -> syn::Result<u64> {
    if attr.is_empty() {
        return Ok(1);
    }
    let nv: syn::MetaNameValue = syn::parse2(attr)?;
    if !nv.path.is_ident("version") {
        return Err(syn::Error::new(nv.path.span(), "expected `version = N`"));
    }
    match &nv.value {
        syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Int(i), .. }) => i.base10_parse(),
        other => Err(syn::Error::new(other.span(), "the version is an integer")),
    }
}

/// One method of the trait: its name, arguments and result type.
struct Method {
    name: syn::Ident,
    args: Vec<(syn::Ident, syn::Type)>,
    output: syn::Type,
    attrs: Vec<syn::Attribute>,
}

/// Names the client stub defines itself, which a method may not take.
const RESERVED: &[&str] = &["at", "connect", "server"];

fn methods(tr: &ItemTrait) -> syn::Result<Vec<Method>> {
    if !tr.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(&tr.generics, "an interface is not generic: its types cross the network"));
    }
    let mut out = Vec::new();
    for item in &tr.items {
        let TraitItem::Fn(f) = item else {
            return Err(syn::Error::new_spanned(item, "an interface has methods only"));
        };
        let sig = &f.sig;
        if sig.asyncness.is_some() || !sig.generics.params.is_empty() {
            let at = match sig.asyncness {
                Some(a) => a.span(),
                None => sig.generics.span(),
            };
            return Err(syn::Error::new(at, "interface methods are neither async nor generic"));
        }
        if RESERVED.contains(&sig.ident.to_string().as_str()) {
            let msg = format!("`{}` is a method of the client stub itself: name this method otherwise", sig.ident);
            return Err(syn::Error::new(sig.ident.span(), msg));
        }
        let mut inputs = sig.inputs.iter();
        match inputs.next() {
            Some(FnArg::Receiver(r)) if r.reference.is_some() && r.mutability.is_none() => {}
            Some(first) => return Err(syn::Error::new_spanned(first, "interface methods take `&self` first")),
            None => return Err(syn::Error::new_spanned(&sig.ident, "interface methods take `&self` first")),
        }
        let mut args = Vec::new();
        for a in inputs {
            let FnArg::Typed(pt) = a else {
                return Err(syn::Error::new(a.span(), "`self` comes first and once"));
            };
            let Pat::Ident(id) = &*pt.pat else {
                return Err(syn::Error::new_spanned(&pt.pat, "arguments are plain names"));
            };
            by_value(&pt.ty)?;
            args.push((id.ident.clone(), (*pt.ty).clone()));
        }
        let output = match &sig.output {
            ReturnType::Default => syn::parse_quote!(()),
            ReturnType::Type(_, t) => (**t).clone(),
        };
        by_value(&output)?;
        let attrs = f.attrs.iter().filter(|a| a.path().is_ident("doc")).cloned().collect();
        out.push(Method { name: sig.ident.clone(), args, output, attrs });
    }
    if out.len() > u16::MAX as usize {
        return Err(syn::Error::new(tr.span(), "too many methods"));
    }
    Ok(out)
}

/// `Vec<u8>`, written so: an argument is marshalled as one byte string
/// rather than serde's sequence of `u8` (same bytes, one copy instead of a
/// loop) or, as the last argument, sent as the segment itself; a result
/// travels as its raw bytes.
fn is_bytes(ty: &syn::Type) -> bool {
    let syn::Type::Path(p) = ty else { return false };
    let Some(last) = p.path.segments.last() else { return false };
    let syn::PathArguments::AngleBracketed(a) = &last.arguments else { return false };
    last.ident == "Vec"
        && a.args.len() == 1
        && matches!(a.args.first(), Some(syn::GenericArgument::Type(syn::Type::Path(u))) if u.path.is_ident("u8"))
}

/// Arguments and results cross the network by value (002): no borrowed
/// or `impl Trait` types, whose meaning stays on the caller's side.
fn by_value(ty: &syn::Type) -> syn::Result<()> {
    match ty {
        syn::Type::Reference(_) => Err(syn::Error::new(
            ty.span(),
            "arguments and results are passed by value: use an owned type (String, Vec<u8>)",
        )),
        syn::Type::ImplTrait(_) => {
            Err(syn::Error::new(ty.span(), "arguments and results are concrete types, not `impl Trait`"))
        }
        syn::Type::Paren(p) => by_value(&p.elem),
        syn::Type::Tuple(t) => t.elems.iter().try_for_each(by_value),
        syn::Type::Array(a) => by_value(&a.elem),
        syn::Type::Slice(s) => by_value(&s.elem),
        _ => Ok(()),
    }
}

/// The fingerprint: BLAKE3 of a canonical description of the interface.
fn fingerprint(name: &str, version: u64, methods: &[Method]) -> u64 {
    // "/2": `Vec<u8>` results travel raw and a last `Vec<u8>` argument may be the segment.
    let mut d = format!("vipc interface/2 {name} version {version}\n");
    for m in methods {
        let args: Vec<String> = m.args.iter().map(|(_, t)| quote!(#t).to_string()).collect();
        let out = &m.output;
        d.push_str(&format!("fn {}({}) -> {}\n", m.name, args.join(", "), quote!(#out)));
    }
    let h = blake3::hash(d.as_bytes());
    u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes"))
}

fn expand(tr: &ItemTrait, version: u64) -> syn::Result<Tokens> {
    let methods = methods(tr)?;
    let name = &tr.ident;
    let vis = &tr.vis;
    let iface = name.to_string();
    let fp = fingerprint(&iface, version, &methods);
    let client = format_ident!("{}Client", name);
    let server = format_ident!("{}Server", name);

    let stubs = methods.iter().enumerate().map(|(i, m)| {
        let i = i as u16;
        let (mname, out, attrs) = (&m.name, &m.output, &m.attrs);
        let names: Vec<_> = m.args.iter().map(|(n, _)| n).collect();
        let types: Vec<_> = m.args.iter().map(|(_, t)| t).collect();
        let take = take_result(out);
        let call = match m.args.split_last() {
            Some(((last, t), head)) if is_bytes(t) => {
                let head = head.iter().map(wire_value);
                quote!(self.inner.call_bulk(#i, &(#(#head,)*), #last, #take))
            }
            _ => {
                let wire = m.args.iter().map(wire_value);
                quote!(self.inner.call_with(#i, &(#(#wire,)*), #take))
            }
        };
        quote! {
            #(#attrs)*
            pub fn #mname(&self #(, #names: #types)*) -> ::vipc_ports::Result<#out> {
                #call
            }
        }
    });
    let arms = methods.iter().enumerate().map(|(i, m)| {
        let i = i as u16;
        let mname = &m.name;
        let names: Vec<_> = m.args.iter().map(|(n, _)| n).collect();
        let wire_types = m.args.iter().map(|(_, t)| wire_type(t));
        let values = m.args.iter().map(handler_value);
        let store = store_result(&m.output);
        quote! {
            #i => {
                let (#(#names,)*): (#(#wire_types,)*) = ::vipc_ports::codec::decode(args)?;
                let result = self.0.#mname(#(#values),*);
                #store
            }
        }
    });
    let bulk_arms: Vec<_> = methods
        .iter()
        .enumerate()
        .filter_map(|(i, m)| {
            let i = i as u16;
            let ((_, t), head) = m.args.split_last()?;
            if !is_bytes(t) {
                return None;
            }
            let mname = &m.name;
            let names: Vec<_> = head.iter().map(|(n, _)| n).collect();
            let wire_types = head.iter().map(|(_, t)| wire_type(t));
            let values = head.iter().map(handler_value);
            let store = store_result(&m.output);
            Some(quote! {
                #i => {
                    let (#(#names,)*): (#(#wire_types,)*) = ::vipc_ports::codec::decode_prefix(head)?;
                    let result = self.0.#mname(#(#values,)* __vipc_bulk);
                    #store
                }
            })
        })
        .collect();
    let dispatch_bulk = (!bulk_arms.is_empty()).then(|| {
        quote! {
            fn dispatch_bulk(
                &self,
                method: u16,
                head: &[u8],
                __vipc_bulk: Vec<u8>,
                __vipc_out: &mut Vec<u8>,
            ) -> ::std::result::Result<(), ::vipc_ports::rpc::DispatchError> {
                match method {
                    #(#bulk_arms)*
                    _ => Err(::vipc_ports::rpc::DispatchError::NoSuchMethod),
                }
            }
        }
    });
    let client_doc = format!("Client stub of [`{iface}`]: each method calls the server and returns its result.");
    let server_doc = format!("Server dispatcher of [`{iface}`]: runs the wrapped implementation's methods.");

    Ok(quote! {
        #tr

        #[doc = #client_doc]
        #vis struct #client<'p> {
            inner: ::vipc_ports::rpc::Client<'p>,
        }

        impl<'p> #client<'p> {
            /// The interface's fingerprint (name, version and method signatures).
            pub const FINGERPRINT: u64 = #fp;

            /// A stub calling `server` from `process`.
            pub fn at(process: &'p ::vipc_ports::vipc::Process, server: ::vipc_ports::vipc::Pid) -> Self {
                Self { inner: ::vipc_ports::rpc::Client::new(process, server, #iface, #fp) }
            }

            /// A stub calling the server registered as `name`.
            pub fn connect(process: &'p ::vipc_ports::vipc::Process, name: &str) -> ::vipc_ports::Result<Self> {
                Ok(Self { inner: ::vipc_ports::rpc::Client::connect(process, name, #iface, #fp)? })
            }

            /// The server's pid.
            pub fn server(&self) -> ::vipc_ports::vipc::Pid {
                self.inner.server()
            }

            #(#stubs)*
        }

        #[doc = #server_doc]
        #vis struct #server<S>(pub S);

        impl<S: #name + Send + Sync> ::vipc_ports::rpc::Dispatch for #server<S> {
            fn interface(&self) -> &'static str {
                #iface
            }
            fn fingerprint(&self) -> u64 {
                #fp
            }
            fn dispatch(
                &self,
                method: u16,
                args: &[u8],
                __vipc_out: &mut Vec<u8>,
            ) -> ::std::result::Result<(), ::vipc_ports::rpc::DispatchError> {
                match method {
                    #(#arms)*
                    _ => Err(::vipc_ports::rpc::DispatchError::NoSuchMethod),
                }
            }
            #dispatch_bulk
        }
    })
}

/// An argument as the client encodes it: `Vec<u8>` as one byte string.
fn wire_value((name, ty): &(syn::Ident, syn::Type)) -> Tokens {
    if is_bytes(ty) {
        quote!(::vipc_ports::serde_bytes::Bytes::new(&#name))
    } else {
        quote!(#name)
    }
}

/// An argument's type as the server decodes it.
fn wire_type(ty: &syn::Type) -> Tokens {
    if is_bytes(ty) {
        quote!(::vipc_ports::serde_bytes::ByteBuf)
    } else {
        quote!(#ty)
    }
}

/// A decoded argument as the handler takes it.
fn handler_value((name, ty): &(syn::Ident, syn::Type)) -> Tokens {
    if is_bytes(ty) {
        quote!(#name.into_vec())
    } else {
        quote!(#name)
    }
}

/// The client's reading of a result: a `Vec<u8>` result is its raw bytes.
fn take_result(out: &syn::Type) -> Tokens {
    if is_bytes(out) {
        quote!(|b: &[u8]| Ok(b.to_vec()))
    } else {
        quote!(::vipc_ports::codec::decode::<#out>)
    }
}

/// The server's answer bytes: a `Vec<u8>` result moved in whole, others
/// encoded. (The generated code's own names start with `__vipc_` where a
/// method's arguments are in scope: an argument named `out` or `bulk` must
/// not take their place.)
fn store_result(out: &syn::Type) -> Tokens {
    if is_bytes(out) {
        quote! {
            *__vipc_out = result;
            Ok(())
        }
    } else {
        quote!(Ok(::vipc_ports::codec::encode_into(&result, __vipc_out)?))
    }
}
