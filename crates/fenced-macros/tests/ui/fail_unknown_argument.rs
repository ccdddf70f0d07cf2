#[fenced::locked(client = client, name = "order:{order_id}")]
async fn typo(client: &fenced::Client, id: u64) -> fenced::Result<()> {
    Ok(())
}

fn main() {}
