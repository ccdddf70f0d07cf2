#[fenced::locked(client = client, name = "x")]
async fn two(client: &fenced::Client, #[lease] a: fenced::Lease, #[lease] b: fenced::Lease) -> fenced::Result<()> {
    Ok(())
}

fn main() {}
