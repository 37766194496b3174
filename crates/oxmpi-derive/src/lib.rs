//! `#[derive(Equivalence)]` for oxmpi: the MPI datatype of a `#[repr(C)]`
//! struct whose fields are all `Equivalence`.
//!
//! The generated impl describes each field at its offset
//! (`core::mem::offset_of!`) with the field's own datatype, resized to the
//! struct's size, and is dense (sent in place) exactly when the fields fill
//! the struct with no padding. The datatype is built once and cached, so the
//! struct must not be generic (a `static` in a generic impl would be shared
//! by every instantiation). Used through `oxmpi`, which re-exports it:
//!
//! ```ignore
//! #[derive(oxmpi::Equivalence, Clone, Copy)]
//! #[repr(C)]
//! struct Cell { value: f64, owner: i32 }
//! ```
#![forbid(unsafe_code)]

use proc_macro::TokenStream;
use quote::quote;
use syn::{parse_macro_input, Data, DeriveInput, Fields};

/// Implements `oxmpi::Equivalence` for a `#[repr(C)]` struct of
/// `Equivalence` fields (named, tuple or unit).
#[proc_macro_derive(Equivalence)]
pub fn derive_equivalence(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn has_repr_c(input: &DeriveInput) -> bool {
    input.attrs.iter().any(|a| {
        if !a.path().is_ident("repr") {
            return false;
        }
        let mut c = false;
        let _ = a.parse_nested_meta(|m| {
            if m.path.is_ident("C") {
                c = true;
            }
            // Skip any arguments (`align(8)`, `packed(2)`).
            if m.input.peek(syn::token::Paren) {
                let content;
                syn::parenthesized!(content in m.input);
                let _: proc_macro2::TokenStream = content.parse()?;
            }
            Ok(())
        });
        c
    })
}

fn expand(input: &DeriveInput) -> syn::Result<proc_macro2::TokenStream> {
    let name = &input.ident;
    let data = match &input.data {
        Data::Struct(s) => s,
        _ => {
            return Err(syn::Error::new_spanned(
                name,
                "Equivalence can only be derived for structs (an enum or union has byte patterns that are not valid values)",
            ))
        }
    };
    if !input.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &input.generics,
            "Equivalence cannot be derived for a generic struct (its datatype is cached per type); implement it by hand",
        ));
    }
    if !has_repr_c(input) {
        return Err(syn::Error::new_spanned(
            name,
            "Equivalence needs #[repr(C)] so that the field layout is defined",
        ));
    }
    let (members, types): (Vec<proc_macro2::TokenStream>, Vec<&syn::Type>) = match &data.fields {
        Fields::Named(f) => f
            .named
            .iter()
            .map(|f| {
                let id = f.ident.as_ref().expect("named field");
                (quote!(#id), &f.ty)
            })
            .unzip(),
        Fields::Unnamed(f) => f
            .unnamed
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let idx = syn::Index::from(i);
                (quote!(#idx), &f.ty)
            })
            .unzip(),
        Fields::Unit => (Vec::new(), Vec::new()),
    };
    let ones = types.iter().map(|_| quote!(1usize));
    Ok(quote! {
        // SAFETY: every field is `Equivalence` (so any bytes at its data
        // positions are a valid field), each is described at its own offset
        // inside the struct, the extent is the struct's size, and the type
        // is dense only when the fields' sizes add up to the struct's size
        // (no padding) and each field is dense.
        unsafe impl ::oxmpi::Equivalence for #name {
            const IS_DENSE: bool = true
                #(&& <#types as ::oxmpi::Equivalence>::IS_DENSE)*
                && ::core::mem::size_of::<#name>() == 0usize
                    #(+ ::core::mem::size_of::<#types>())*;

            fn equivalent_datatype() -> ::oxmpi::UserDatatype {
                static DATATYPE: ::std::sync::OnceLock<::oxmpi::UserDatatype> =
                    ::std::sync::OnceLock::new();
                DATATYPE
                    .get_or_init(|| {
                        ::oxmpi::UserDatatype::structured(
                            &[#(#ones),*],
                            &[#(::core::mem::offset_of!(#name, #members) as isize),*],
                            &[#(<#types as ::oxmpi::Equivalence>::equivalent_datatype()),*],
                        )
                        .and_then(|t| t.resized(0, ::core::mem::size_of::<#name>() as isize))
                        .expect("the fields of a struct in memory form a valid datatype")
                    })
                    .clone()
            }
        }
    })
}
