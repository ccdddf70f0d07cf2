//! `#[fenced::locked(...)]`: an async function that runs under a distributed lock, the Rust
//! counterpart of the annotation-driven locks of Java frameworks (`@Lock`, `@SchedulerLock`). Use it through
//! `fenced::locked`; the expansion is documented there.

use proc_macro::TokenStream;
use proc_macro2::Span;
use quote::quote;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Expr, FnArg, ItemFn, LitStr, Pat, Token, parse_macro_input};

/// Runs the async function under the lock `name` of `client`; see `fenced::locked`.
#[proc_macro_attribute]
pub fn locked(attr: TokenStream, item: TokenStream) -> TokenStream {
    let options = parse_macro_input!(attr as Options);
    let function = parse_macro_input!(item as ItemFn);
    match expand(options, function) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// The attribute's arguments: `client = EXPR, name = "FORMAT", ttl = "30s", wait = "5s"`,
/// and which primitive: `kind = "lock" | "fair" | "read" | "write"`, or
/// `permits = N` for a semaphore of N.
struct Options {
    client: Option<Expr>,
    name: Option<LitStr>,
    ttl: Option<u64>,
    wait: Option<u64>,
    kind: Option<LitStr>,
    permits: Option<syn::LitInt>,
}

impl Parse for Options {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut options = Options {
            client: None,
            name: None,
            ttl: None,
            wait: None,
            kind: None,
            permits: None,
        };
        let pairs = Punctuated::<syn::MetaNameValue, Token![,]>::parse_terminated(input)?;
        for pair in pairs {
            let key = pair
                .path
                .get_ident()
                .map(ToString::to_string)
                .unwrap_or_default();
            match key.as_str() {
                "client" => options.client = Some(pair.value),
                "name" => options.name = Some(string(&pair.value)?),
                "ttl" => options.ttl = Some(millis(&string(&pair.value)?)?),
                "wait" => options.wait = Some(millis(&string(&pair.value)?)?),
                "kind" => options.kind = Some(string(&pair.value)?),
                "permits" => options.permits = Some(permits(&pair.value)?),
                _ => {
                    return Err(syn::Error::new_spanned(
                        &pair.path,
                        "unknown option; expected client, name, ttl, wait, kind or permits",
                    ));
                }
            }
        }
        Ok(options)
    }
}

/// A permit count: an integer literal from 1 to `u32::MAX`.
fn permits(value: &Expr) -> syn::Result<syn::LitInt> {
    match value {
        Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Int(n),
            ..
        }) if matches!(n.suffix(), "" | "u32") && n.base10_parse::<u32>().is_ok_and(|n| n > 0) => {
            Ok(n.clone())
        }
        other => Err(syn::Error::new_spanned(
            other,
            "expected a number of permits from 1 to 4294967295",
        )),
    }
}

fn string(value: &Expr) -> syn::Result<LitStr> {
    match value {
        Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(s),
            ..
        }) => Ok(s.clone()),
        other => Err(syn::Error::new_spanned(other, "expected a string literal")),
    }
}

/// A duration literal ("500ms", "30s", "5m", "1h") in milliseconds, checked at compile time.
fn millis(lit: &LitStr) -> syn::Result<u64> {
    parse_duration(&lit.value()).ok_or_else(|| {
        syn::Error::new_spanned(
            lit,
            "expected a duration such as \"500ms\", \"30s\", \"5m\" or \"1h\"",
        )
    })
}

fn parse_duration(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    let scale = match unit.trim() {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return None,
    };
    number.checked_mul(scale).filter(|ms| *ms > 0)
}

fn expand(options: Options, mut function: ItemFn) -> syn::Result<proc_macro2::TokenStream> {
    if function.sig.asyncness.is_none() {
        return Err(syn::Error::new_spanned(
            function.sig.fn_token,
            "#[fenced::locked] goes on an async fn",
        ));
    }
    let client = options.client.ok_or_else(|| {
        syn::Error::new(
            Span::call_site(),
            "missing `client = EXPR` (an expression giving a &fenced::Client or fenced::Client)",
        )
    })?;
    let name = options.name.ok_or_else(|| {
        syn::Error::new(
            Span::call_site(),
            "missing `name = \"...\"` (a format string over the arguments, like \"order:{id}\")",
        )
    })?;
    // The parameter marked #[lease], if any, leaves the signature: the lock supplies it.
    let mut lease_pat: Option<Box<Pat>> = None;
    let mut kept = Punctuated::<FnArg, Token![,]>::new();
    for arg in std::mem::take(&mut function.sig.inputs) {
        match arg {
            FnArg::Typed(mut typed) if typed.attrs.iter().any(|a| a.path().is_ident("lease")) => {
                if lease_pat.is_some() {
                    return Err(syn::Error::new_spanned(
                        typed,
                        "only one #[lease] parameter",
                    ));
                }
                typed.attrs.retain(|a| !a.path().is_ident("lease"));
                lease_pat = Some(typed.pat);
            }
            other => kept.push(other),
        }
    }
    function.sig.inputs = kept;
    let lease = match lease_pat {
        Some(pat) => quote!(#pat),
        None => quote!(_),
    };
    let ttl = options
        .ttl
        .map(|ms| quote!(.with_ttl(::std::time::Duration::from_millis(#ms))));
    let wait = options.wait.map(|ms| {
        quote!(.with_wait(::fenced::WaitPolicy::up_to(::std::time::Duration::from_millis(#ms))))
    });
    // Which primitive, and its scoped run.
    let kind = options.kind.as_ref().map(LitStr::value);
    let (handle, run) = match (kind.as_deref(), &options.permits) {
        (None | Some("lock"), None) => (
            quote!(lock(&(#client), ::std::format!(#name))),
            quote!(with_lock),
        ),
        (Some("reentrant"), None) => {
            return Err(syn::Error::new_spanned(
                &options.kind,
                "kind = \"reentrant\" would take a new hold per call, which a nested call of the same name would wait for; re-enter a ReentrantLock through its guard or HolderHandle instead",
            ));
        }
        (Some("fair"), None) => (
            quote!(fair_lock(&(#client), ::std::format!(#name))),
            quote!(with_lock),
        ),
        (Some("read"), None) => (
            quote!(rw_lock(&(#client), ::std::format!(#name))),
            quote!(with_read),
        ),
        (Some("write"), None) => (
            quote!(rw_lock(&(#client), ::std::format!(#name))),
            quote!(with_write),
        ),
        (None | Some("semaphore"), Some(n)) => (
            quote!(semaphore(&(#client), ::std::format!(#name), #n)),
            quote!(with_permit),
        ),
        (Some("semaphore"), None) => {
            return Err(syn::Error::new_spanned(
                &options.kind,
                "a semaphore needs `permits = N`",
            ));
        }
        (Some(_), None) => {
            return Err(syn::Error::new_spanned(
                &options.kind,
                "unknown kind; expected \"lock\", \"fair\", \"read\", \"write\" or \"semaphore\"",
            ));
        }
        (Some(_), Some(n)) => {
            return Err(syn::Error::new_spanned(
                n,
                "`permits` goes with a semaphore only (leave out `kind`)",
            ));
        }
    };
    let body = &function.block;
    let attrs = &function.attrs;
    let vis = &function.vis;
    let sig = &function.sig;
    Ok(quote! {
        #(#attrs)*
        #vis #sig {
            let __fenced_lock = ::fenced::Client::#handle #ttl #wait;
            match __fenced_lock
                .#run(|#lease: ::fenced::Lease| async move #body)
                .await
            {
                ::std::result::Result::Ok(out) => out,
                ::std::result::Result::Err(e) => {
                    ::fenced::__private::LockedOutput::from_lock_error(e)
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::parse_duration;

    #[test]
    fn durations_are_checked_when_the_code_is_compiled() {
        assert_eq!(parse_duration("500ms"), Some(500));
        assert_eq!(parse_duration("30s"), Some(30_000));
        assert_eq!(parse_duration("5m"), Some(300_000));
        assert_eq!(parse_duration("1h"), Some(3_600_000));
        for bad in ["", "s", "30", "30x", "-1s", "0s", "99999999999999999999s"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }
}
