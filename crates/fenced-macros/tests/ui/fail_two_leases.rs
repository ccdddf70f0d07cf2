use fenced::{Client, Lease};

#[fenced::locked(client = client, name = "x")]
async fn two(client: &Client, #[lease] a: Lease, #[lease] b: Lease) -> fenced::Result<()> {
    Ok(())
}

fn main() {}
