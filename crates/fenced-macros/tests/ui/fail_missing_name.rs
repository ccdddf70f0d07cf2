#[fenced::locked(client = client)]
async fn no_name(client: &fenced::Client) -> fenced::Result<()> {
    Ok(())
}

fn main() {}
